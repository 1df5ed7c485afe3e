"""A callback delivery as the outside sees it, with its attempts: the per-transaction list
(`interface/transactions/`) and the partner's list and redelivery (`interface/callbacks/`) show the same."""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec

from interface.http.shapes import Body, Timestamp

DeliveryStatus = Literal["pending", "delivered", "failed", "stopped"]
AttemptOutcome = Literal["delivered", "failed", "stopped"]
EventType = Literal["transaction.status_changed"]


class CallbackAttempt(Body):
    number: Annotated[int, msgspec.Meta(ge=1)]
    at: Timestamp
    outcome: AttemptOutcome
    response_code: int | None  # the HTTP status answered, none without an answer
    error: str | None
    duration_ms: Annotated[int, msgspec.Meta(ge=0)]


class CallbackDelivery(Body):
    event_id: str  # the `webhook-id` of every attempt; `POST /callbacks/{eventId}/redeliver` names it
    transaction_code: str
    sequence: Annotated[int, msgspec.Meta(ge=1)]  # the transaction's status changes, counted from 1
    type: EventType
    transaction_status: str
    url: str
    status: DeliveryStatus  # failed: given up after 24 hours of retries; stopped: the URL answered 410
    created: Timestamp
    next_attempt_at: Timestamp | None  # while pending
    finished_at: Timestamp | None
    response_code: int | None  # of the last answer
    attempts: list[CallbackAttempt]
