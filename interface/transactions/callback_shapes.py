"""The callbacks' bodies: the event POSTed to a partner's callback URL, and the list of a transaction's
deliveries (a delivery itself is shown alike by every endpoint: `interface.shared.callback_shapes`)."""

from __future__ import annotations

from interface.http.shapes import Body, Timestamp
from interface.shared.callback_shapes import CallbackDelivery, EventType
from interface.shared.transaction_shapes import Transaction


class CallbackEvent(Body):
    """What the callback URL receives: `id` is the `webhook-id` header too, the same on every retry."""

    id: str
    type: EventType
    created: Timestamp  # when the status changed
    transaction: Transaction  # as it stood right after the change


class CallbackDeliveries(Body):
    transaction_code: str
    deliveries: list[CallbackDelivery]
