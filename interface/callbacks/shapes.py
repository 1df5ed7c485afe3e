"""The answers of the callbacks' management: a page of the partner's deliveries (each as every endpoint shows
it, `interface.shared.callback_shapes`), a rotated secret, and the state of the partner's secrets."""

from __future__ import annotations

from interface.http.shapes import Body, Timestamp
from interface.shared.callback_shapes import CallbackDelivery


class CallbackPage(Body):
    """One page of the partner's callback deliveries across its transactions, newest first."""

    page: int
    page_size: int
    total: int
    total_pages: int
    records: list[CallbackDelivery]


class CallbackSecretState(Body):
    """Which secrets sign the partner's callbacks (never a secret itself)."""

    rotated_at: Timestamp | None  # the last rotation; none: the configured secret signs
    previous_until: Timestamp | None  # the secret rotated out signs too until then; none: it signs no more


class RotatedCallbackSecret(Body):
    """The new secret, shown this once: it signs every callback from now on, beside the one it replaced
    until `previousUntil`."""

    secret: str  # whsec_..., a Standard Webhooks secret
    rotated_at: Timestamp
    previous_until: Timestamp | None
