"""POST /connect/token: its route and the shapes of its form and its answer (its use case, which the
console's sign-in shares, is `interface.shared.token_issuance`), and `FEATURE`, what the app lists of it."""

from __future__ import annotations

from interface.shared.feature import Feature
from interface.tokens import shapes
from interface.tokens.routes import TokenController

# the token endpoint's own codes (RFC 6749 5.2), beyond the shared machinery's
FEATURE = Feature(
    name="tokens",
    route_handlers=[TokenController],
    own_codes={
        "issueToken": {
            400: ["invalid_request", "unsupported_grant_type", "invalid_scope"],
            401: ["invalid_client"],
            429: ["too_many_failed_attempts", "secret_checks_busy"],
        }
    },
    shapes=[shapes],
)
