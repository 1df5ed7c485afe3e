"""A page of a partner's events feed: its rows of the index after the cursor (`projections/events_feed.py`,
in log order), each subject replayed from the log up to the row's version, and the rows whose event changed
its subject's status shown, each with its cursor.

What a status change is comes from the aggregates themselves: an event is shown when the status its
subject had before it differs from the status after it (the event that creates a subject always is). So the
feed shows every status change the domain records, new ones included, and nothing else: a transaction's
`Committed` that rides with its creation (already `Sending`), a sendout with too few confirmations, a
customer's new account are passed over.

A transaction is shown exactly as its callback carries it (`interface/shared/transaction_presenters.py`,
the same presenter), and an event's `id` is its callback's `webhook-id` (`projections.callbacks`), so a
platform that takes both deduplicates them by it. A customer is shown as `GET /customer/{code}` shows it,
without its accounts.

Reads are bounded: at most `limit` changes, and at most MOST_SCANNED rows of the index looked at for one
answer (a page that passed over that many unshown rows says `hasMore` and reads on from where it stopped).
The index is read on the read models' pool, the subjects' events on the event store's, one connection at a
time and only while a statement runs: a request waiting for news holds none (`interface/events/feed.py`).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import UTC
from typing import Any
from uuid import UUID

from application.history import happened_at
from application.ledger import Ledger
from interface.events import shapes as s
from interface.events.cursors import ahead_of_log, cursor_of
from interface.http.read_your_writes import WritePositions
from interface.shared import transaction_presenters as presenters
from projections import status
from projections.callbacks.projection import event_id
from projections.events_feed import (
    CUSTOMER,
    EVENTS_FEED,
    TRANSACTION,
    FeedRow,
    feed_position,
    feed_rows,
    news_since,
)

TYPES = {"transaction.status_changed": TRANSACTION, "customer.status_changed": CUSTOMER}
TYPE_OF = {subject: name for name, subject in TYPES.items()}
MOST_SCANNED = 5_000  # rows of the index one answer looks at, at most


@dataclass(frozen=True)
class FeedQuery:
    after: int  # a position in the log: the page starts after it
    subjects: tuple[str, ...]  # of TYPES' values
    limit: int


@dataclass(frozen=True)
class FeedPage:
    data: list[s.FeedEvent]
    next_position: int  # the position the next page starts after
    has_more: bool
    position: int  # the index's position when read: none of the partner's rows up to it was left unread
    written: int  # the partner's last write (0 for none)
    behind: bool  # the index had not applied that write, and its projection was not failing

    def body(self) -> s.EventsPage:
        return s.EventsPage(data=self.data, next_cursor=cursor_of(self.next_position), has_more=self.has_more)


class FeedReader:
    """The feed's reads, each a few statements on a pooled connection, none held between them."""

    def __init__(self, ledger: Ledger, connection: Any, positions: WritePositions) -> None:
        """`connection()` lends a connection of the read models' pool (a context manager)."""
        self.ledger = ledger
        self.connection = connection
        self.positions = positions

    @classmethod
    def on_view(cls, ledger: Ledger, view: Any, positions: WritePositions) -> FeedReader:
        """On the pool of a view of the read schema (the API's view of the read models)."""
        return cls(ledger, view.datastore.get_connection, positions)

    def page(self, partner: str, query: FeedQuery) -> FeedPage:
        """The partner's changes after `query.after`: at most `query.limit`, and whether more follow."""
        with self._lent() as conn:
            position = feed_position(conn)
            written = self.positions.last(conn, partner)
            behind = position < written and not status.has_failure(conn, EVENTS_FEED.name)
        if query.after > position:
            head = self.ledger.head()
            if query.after > head:
                raise ahead_of_log("after", query.after, head)
        data: list[s.FeedEvent] = []
        examined, last_shown, scanned = query.after, query.after, 0
        while True:
            needed = query.limit + 1 - len(data)  # one more than the page shows: whether more follow
            chunk = needed + needed // 3  # a few rows of the index show nothing (see the docstring)
            with self._lent() as conn:
                rows = feed_rows(conn, partner, examined, query.subjects, chunk)
            shown = self._shown(rows)
            for row in rows:
                entry = shown.get(row.position)
                if entry is not None:
                    if len(data) == query.limit:
                        return FeedPage(data, last_shown, True, position, written, behind)
                    data.append(entry)
                    last_shown = row.position
                examined = row.position
            scanned += len(rows)
            if len(rows) < chunk or scanned >= MOST_SCANNED:
                more = len(rows) == chunk
                return FeedPage(data, examined, more, position, written, behind)

    def news(self, since: int | None) -> tuple[int, frozenset[str]]:
        """The index's position, and the partners with rows after `since` up to it (the waker's poll)."""
        with self._lent() as conn:
            return news_since(conn, since)

    def _lent(self) -> AbstractContextManager[Any]:
        return self.connection()

    def _shown(self, rows: list[FeedRow]) -> dict[int, s.FeedEvent]:
        """The rows whose event changed its subject's status, by position, each as the feed shows it: the
        subjects' histories read in one query and replayed up to the versions the rows name."""
        wanted: dict[UUID, dict[int, FeedRow]] = {}
        for row in rows:
            wanted.setdefault(row.subject_id, {})[row.version] = row
        if not wanted:
            return {}
        histories = self.ledger.store.histories_of(list(wanted))
        settings = self.ledger.settings
        shown: dict[int, s.FeedEvent] = {}
        for subject_id, versions in wanted.items():
            for event, subject in status_changes(histories.get(subject_id, []), versions):
                row = versions[event.originator_version]
                shown[row.position] = entry(settings, row, event, subject)
        return shown


def status_changes(events: list[Any], versions: dict[int, Any]) -> Iterator[tuple[Any, Any]]:
    """Of the events at `versions`, those that changed their subject's status, each with the subject as it
    stood right after it (the same object, moved on by the next events: show it before the next)."""
    subject, last = None, max(versions)
    for event in events:
        before = None if subject is None else subject.status
        subject = event.mutate(subject)
        version = event.originator_version
        if version in versions and subject.status != before:
            yield event, subject
        if version >= last:
            return


def entry(settings: Any, row: FeedRow, event: Any, subject: Any) -> s.FeedEvent:
    """A change as the feed shows it: its id (its callback's, for a transaction), cursor, type and time, and
    its subject as it stood right after it."""
    common = {
        "id": event_id(row.subject_id, row.version),
        "cursor": cursor_of(row.position),
        "type": TYPE_OF[row.subject],
        "created": happened_at(event).astimezone(UTC),
    }
    if row.subject == TRANSACTION:
        return s.FeedEvent(**common, transaction=presenters.transaction(settings, subject).transaction)
    return s.FeedEvent(**common, customer=customer_body(subject))


def customer_body(customer: Any) -> s.FeedCustomer:
    return s.FeedCustomer(
        customer_code=customer.code,
        portfolio_code=customer.portfolio,
        trust_level=customer.trust_level,
        status=str(customer.status),
        currency_code=customer.currency,
        created=customer.created.astimezone(UTC),
    )
