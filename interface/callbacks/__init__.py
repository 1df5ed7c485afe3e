"""The callbacks the partner manages (`GET /callbacks`, `POST /callbacks/{eventId}/redeliver`, `POST
/callbacks/secret/rotate`, `DELETE /callbacks/secret/previous`): routes, shapes and `FEATURE`, what the app
lists of them. A delivery is shown as every endpoint shows it (`interface.shared.callback_shapes`); the
outbox, the delivery worker and the secrets are `projections.callbacks`."""

from __future__ import annotations

from interface.callbacks import shapes
from interface.callbacks.routes import CallbackDeliveriesController, CallbackSecretController
from interface.shared import callback_shapes
from interface.shared.feature import Feature

FEATURE = Feature(
    name="callbacks",
    route_handlers=[CallbackDeliveriesController, CallbackSecretController],
    own_codes={
        "redeliverCallback": {404: ["callback_not_found"]},
        "rotateCallbackSecret": {400: ["idempotency_key_not_accepted"]},
    },
    shapes=[shapes, callback_shapes],
)
