"""What the callbacks look like from outside: the body of a callback (the `transaction` object as every
endpoint presents it), handed to the delivery worker as its renderer, and the list of a transaction's
deliveries the endpoint shows (each delivery as every endpoint shows it: `interface.shared`). The rest of the
feature is `projections.callbacks`."""

from __future__ import annotations

import msgspec

from application.settings import Settings
from domain.transaction import Transaction
from interface.shared import transaction_presenters as presenters
from interface.shared.callback_presenters import delivery
from interface.transactions import callback_shapes as c
from projections.callbacks.delivery import EVENT_TYPE, Renderer
from projections.callbacks.outbox import Delivery, DeliveryRecord

ENCODER = msgspec.json.Encoder(decimal_format="number")


def renderer(settings: Settings) -> Renderer:
    """A delivery's body: `{id, type, created, transaction}`, the transaction as the endpoints show it."""

    def render(delivery: Delivery, transaction: Transaction) -> bytes:
        return ENCODER.encode(
            c.CallbackEvent(
                id=delivery.event_id,
                type=EVENT_TYPE,
                created=delivery.created,
                transaction=presenters.transaction(settings, transaction).transaction,
            )
        )

    return render


def deliveries(transaction_code: str, records: list[DeliveryRecord]) -> c.CallbackDeliveries:
    return c.CallbackDeliveries(
        transaction_code=transaction_code, deliveries=[delivery(record) for record in records]
    )
