from __future__ import annotations

import base64
import binascii
from typing import Annotated

from litestar import Controller, Request, post
from litestar.connection import ASGIConnection
from litestar.enums import RequestEncodingType
from litestar.handlers.base import BaseRouteHandler
from litestar.params import Body

from application.credentials import ClientRecord, Credentials
from application.secret_hashes import SecretChecksBusy
from interface.auth import FailedAttempts, InvalidScope, TokenService
from interface.controllers.common import problems
from interface.problems import ApiProblem, RequestRefused
from interface.schemas.requests import TokenForm
from interface.schemas.responses import Token

FORM = RequestEncodingType.URL_ENCODED.value


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


def _authenticated_client(request: Request, client_id: str, secret: str) -> ClientRecord:
    """The client whose secret this is; 429 while the client id or the address has failed too often
    (checked before the secret, so refused attempts cost nothing) or while the secret cannot be checked
    now, 401 for an unknown client or a wrong secret."""
    attempts: FailedAttempts = request.app.state.failed_attempts
    address = request.client.host if request.client else None
    retry_after = attempts.check(client_id, address)
    if retry_after is not None:
        raise ApiProblem(
            429,
            "too_many_failed_attempts",
            "too many failed attempts; retry later",
            headers={"Retry-After": str(retry_after)},
        )
    credentials: Credentials = request.app.state.credentials
    try:
        client = credentials.verify_secret(client_id, secret)
    except SecretChecksBusy as busy:
        raise ApiProblem(
            429,
            "secret_checks_busy",
            "too many secrets are being checked at once; retry shortly",
            headers={"Retry-After": str(busy.retry_after)},
        ) from None
    if client is None:
        attempts.record_failure(client_id, address)
        raise ApiProblem(
            401,
            "invalid_client",
            "unknown client or wrong secret",
            headers={"WWW-Authenticate": 'Basic realm="broker-ledger"'},
        )
    attempts.clear(client_id, address)
    return client


def form_encoded(connection: ASGIConnection, _: BaseRouteHandler) -> None:
    """A token request is a form (RFC 6749, 4.4): a JSON body would be read as an empty form and refused for
    lacking grant_type, which misleads; it is refused for its media type instead."""
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
        self, request: Request, data: Annotated[TokenForm, Body(media_type=RequestEncodingType.URL_ENCODED)]
    ) -> Token:
        """OAuth2 client credentials: a signed bearer token for a configured client (3600 s by default)."""
        if data.grant_type != "client_credentials":
            raise ApiProblem(400, "unsupported_grant_type", "grant_type must be client_credentials")
        client_id, secret = _basic_credentials(request) or (data.client_id, data.client_secret)
        if not client_id or secret is None:
            raise ApiProblem(
                400, "invalid_request", "give client_id and client_secret (form fields or Basic auth)"
            )
        client = _authenticated_client(request, client_id, secret)
        tokens: TokenService = request.app.state.tokens
        try:
            issued = tokens.issue(client, data.scope)
        except InvalidScope as error:
            raise ApiProblem(400, "invalid_scope", error.reason) from None
        return Token(
            access_token=issued.access_token,
            token_type=issued.token_type,
            expires_in=issued.expires_in,
            scope=issued.scope,
        )
