"""POST /connect/token: the client credentials form and the token."""

from __future__ import annotations

from typing import Annotated

import msgspec


class TokenForm(msgspec.Struct, kw_only=True, frozen=True):
    """OAuth2 client credentials (RFC 6749 4.4); client_id and client_secret, or HTTP Basic instead."""

    grant_type: Annotated[str, msgspec.Meta(extra_json_schema={"enum": ["client_credentials"]})]
    client_id: Annotated[str, msgspec.Meta(min_length=1, max_length=255)] | None = None
    client_secret: Annotated[str, msgspec.Meta(max_length=255)] | None = None
    scope: Annotated[str, msgspec.Meta(max_length=255, description="roles, space-separated")] | None = None


class Token(msgspec.Struct, kw_only=True, frozen=True):
    access_token: str
    token_type: str
    expires_in: int
    scope: str


# What a body's schema says beyond its fields, merged into the API document
# (`interface.api_document.openapi`).
SCHEMA_RULES = {
    # a token request names the client in the form; a client using HTTP Basic instead may leave both out
    "TokenForm": {"required": ["grant_type", "client_id", "client_secret"]},
}
