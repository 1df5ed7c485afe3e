"""A delivery of the outbox (`projections.callbacks.outbox.DeliveryRecord`) as every endpoint shows it."""

from __future__ import annotations

from interface.shared import callback_shapes as c
from projections.callbacks.delivery import EVENT_TYPE
from projections.callbacks.outbox import DeliveryRecord


def delivery(record: DeliveryRecord) -> c.CallbackDelivery:
    return c.CallbackDelivery(
        event_id=record.event_id,
        transaction_code=record.transaction_code,
        sequence=record.sequence,
        type=EVENT_TYPE,
        transaction_status=record.transaction_status,
        url=record.url,
        status=record.status,  # type: ignore[arg-type]
        created=record.created,
        next_attempt_at=record.next_attempt_at,
        finished_at=record.finished_at,
        response_code=record.response_code,
        attempts=[
            c.CallbackAttempt(
                number=attempt.number,
                at=attempt.at,
                outcome=attempt.outcome,  # type: ignore[arg-type]
                response_code=attempt.response_code,
                error=attempt.error,
                duration_ms=attempt.duration_ms,
            )
            for attempt in record.attempts
        ],
    )
