"""The callbacks' bodies: the event POSTed to a partner's callback URL, and the list of deliveries."""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec

from interface.http.shapes import Body, Timestamp
from interface.shared.transaction_shapes import Transaction

DeliveryStatus = Literal["pending", "delivered", "failed", "stopped"]
AttemptOutcome = Literal["delivered", "failed", "stopped"]


class CallbackEvent(Body):
    """What the callback URL receives: `id` is the `webhook-id` header too, the same on every retry."""

    id: str
    type: Literal["transaction.status_changed"]
    created: Timestamp  # when the status changed
    transaction: Transaction  # as it stood right after the change


class CallbackAttempt(Body):
    number: Annotated[int, msgspec.Meta(ge=1)]
    at: Timestamp
    outcome: AttemptOutcome
    response_code: int | None  # the HTTP status answered, none without an answer
    error: str | None
    duration_ms: Annotated[int, msgspec.Meta(ge=0)]


class CallbackDelivery(Body):
    event_id: str
    sequence: Annotated[int, msgspec.Meta(ge=1)]  # the transaction's status changes, counted from 1
    type: Literal["transaction.status_changed"]
    transaction_status: str
    url: str
    status: DeliveryStatus  # failed: given up after 24 hours of retries; stopped: the URL answered 410
    created: Timestamp
    next_attempt_at: Timestamp | None  # while pending
    finished_at: Timestamp | None
    response_code: int | None  # of the last answer
    attempts: list[CallbackAttempt]


class CallbackDeliveries(Body):
    transaction_code: str
    deliveries: list[CallbackDelivery]
