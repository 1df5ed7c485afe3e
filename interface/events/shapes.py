"""The feed's answer: a page of a partner's status changes in log order, each with its cursor."""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec

from interface.http.shapes import Body, Timestamp
from interface.shared.transaction_shapes import Transaction

EventType = Literal["transaction.status_changed", "customer.status_changed"]
Cursor = Annotated[str, msgspec.Meta(description="a position in the event log, opaque: keep it as given")]


class FeedCustomer(Body):
    """A customer as `GET /customer/{customerCode}` shows it, but for its accounts (read them there)."""

    customer_code: str
    portfolio_code: str | None
    trust_level: str
    status: str
    currency_code: str | None
    created: Timestamp


class FeedEvent(Body, omit_defaults=True):
    """One status change: `id` is the same for every read of it (and for a transaction, the `id` and
    `webhook-id` of its callback); `cursor` reads the feed after it; `created` is when the status changed
    (the ledger's time, as `updated` shows); `transaction` or `customer` as it stood right after the change
    (a transaction exactly as its callback carries it)."""

    id: str
    cursor: Cursor
    type: EventType
    created: Timestamp
    transaction: Transaction | None = None
    customer: FeedCustomer | None = None


class EventsPage(Body):
    """At most `limit` changes after the cursor given; `nextCursor` reads on after the last change this page
    shows or passed over (the cursor given when there is none); `hasMore`: the log holds more of the
    partner's events after it, to read at once."""

    data: list[FeedEvent]
    next_cursor: Cursor
    has_more: bool
