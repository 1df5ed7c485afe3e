from __future__ import annotations

import base64
import binascii
from typing import Annotated

from litestar import Controller, Request, post
from litestar.connection import ASGIConnection
from litestar.di import NamedDependency
from litestar.enums import RequestEncodingType
from litestar.handlers.base import BaseRouteHandler
from litestar.params import Body

from interface.http.documented import problems
from interface.http.problems import ApiProblem, RequestRefused
from interface.shared.token_issuance import TokenIssuance
from interface.tokens.shapes import Token, TokenForm

FORM = RequestEncodingType.URL_ENCODED.value


def client_credentials(request: Request, form: TokenForm) -> tuple[str, str]:
    """The client id and secret of a client credentials grant: from Basic auth, else from the form."""
    if form.grant_type != "client_credentials":
        raise ApiProblem(400, "unsupported_grant_type", "grant_type must be client_credentials")
    client_id, secret = _basic_credentials(request) or (form.client_id, form.client_secret)
    if not client_id or secret is None:
        raise ApiProblem(
            400, "invalid_request", "give client_id and client_secret (form fields or Basic auth)"
        )
    return client_id, secret


def _basic_credentials(request: Request) -> tuple[str, str] | None:
    header = request.headers.get("authorization", "")
    if not header.lower().startswith("basic "):
        return None
    try:
        client_id, _, secret = base64.b64decode(header[6:], validate=True).decode().partition(":")
    except (binascii.Error, UnicodeDecodeError):
        raise ApiProblem(
            400, "invalid_request", "the Basic authorization header is not valid base64"
        ) from None
    return client_id, secret


async def form_encoded(connection: ASGIConnection, _: BaseRouteHandler) -> None:
    """A token request is a form (RFC 6749, 4.4): a JSON body would be read as an empty form and refused for
    lacking grant_type, which misleads; it is refused for its media type instead. (A coroutine: litestar runs
    a plain function guard in a worker thread.)"""
    media_type = connection.headers.get("content-type", "").partition(";")[0].strip().lower()
    if media_type != FORM:
        raise RequestRefused(
            415,
            "unsupported_media_type",
            f"send the token request as a form, Content-Type: {FORM}; "
            f"got {connection.headers.get('content-type') or 'no Content-Type'}",
        )


class TokenController(Controller):
    path = "/connect/token"
    tags = ["Authentication"]
    security = [{}]
    guards = [form_encoded]

    @post(
        "/",
        operation_id="issueToken",
        status_code=200,
        responses=problems(401, 415, 429),
        sync_to_thread=True,
        exclude_from_auth=True,
    )
    def issue(
        self,
        request: Request,
        data: Annotated[TokenForm, Body(media_type=RequestEncodingType.URL_ENCODED)],
        issuance: NamedDependency[TokenIssuance],
    ) -> Token:
        """OAuth2 client credentials: a signed bearer token for a configured client (3600 s by default)."""
        client_id, secret = client_credentials(request, data)
        issued = issuance.issue(
            client_id, secret, data.scope, request.client.host if request.client else None
        )
        return Token(
            access_token=issued.access_token,
            token_type=issued.token_type,
            expires_in=issued.expires_in,
            scope=issued.scope,
        )
