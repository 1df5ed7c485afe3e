"""Bearer tokens on every route but the token endpoint and the API document; roles per route.

The middleware verifies the token and puts the `Principal` on the connection (`connection.user`);
the `authorize` guard checks the route's roles and api_version. Partner isolation follows from the
principal: every use case is called with `principal.partner`.

The `api_version` header: every endpoint serves one version (1.2, or 1.1 for the alternative sell
status update); a missing header, a repeated one or another version is refused with 400 and the
supported value."""

from __future__ import annotations

from typing import Any

from litestar.connection import ASGIConnection
from litestar.exceptions import NotAuthorizedException
from litestar.handlers.base import BaseRouteHandler
from litestar.middleware import AbstractAuthenticationMiddleware, AuthenticationResult
from litestar.types import ASGIApp

from domain.errors import quoted_text
from interface.http.auth import InvalidToken, Principal, TokenService, parse_bearer
from interface.http.problems import ApiProblem

BROKER = "broker"
OPERATOR = "operator"
AUDITOR = "auditor"
# the console (`interface.console`) has sessions of its own, in a cookie, rather than bearer tokens
UNAUTHENTICATED_PATHS = [
    r"^/connect/token\Z",
    "^/schema",
    r"^/health\Z",
    r"^/health/live\Z",
    r"^/metrics\Z",
    r"^/console(/|\Z)",
]


class BearerAuthentication(AbstractAuthenticationMiddleware):
    """Verifies the bearer token by `tokens`, which the composition root hands it (`DefineMiddleware`)."""

    def __init__(self, app: ASGIApp, tokens: TokenService, **options: Any) -> None:
        super().__init__(app, **options)
        self.tokens = tokens

    async def authenticate_request(self, connection: ASGIConnection) -> AuthenticationResult:
        try:
            principal = self.tokens.verify(parse_bearer(connection.headers.get("authorization")))
        except InvalidToken as error:
            raise NotAuthorizedException(
                detail=f"a valid bearer token is required: {error.reason}",
                headers={"WWW-Authenticate": 'Bearer realm="broker-ledger", error="invalid_token"'},
            ) from None
        return AuthenticationResult(user=principal, auth=principal)


async def authorize(connection: ASGIConnection, handler: BaseRouteHandler) -> None:
    """The principal must hold one of the route's roles, and the api_version must be the route's.

    OPTIONS is let through unauthenticated (as the middleware does): the framework answers it with the
    route's `Allow` header only, as CORS preflights need. A coroutine although it awaits nothing: litestar
    runs a plain function guard in a worker thread, a thread hop (and GIL contention) per check."""
    if connection.scope["method"] == "OPTIONS":
        return
    principal: Principal = connection.user
    roles = handler.opt.get("roles", frozenset())
    if not principal.roles & roles:
        raise ApiProblem(
            403,
            "forbidden",
            f"client {principal.client_id} lacks the role this endpoint needs ({' or '.join(sorted(roles))})",
        )
    check_api_version(connection, handler)


async def authorize_route(connection: ASGIConnection, handler: BaseRouteHandler) -> None:
    """Runs the route's guards, as litestar does before the handler, but on the handler itself: litestar
    hands each guard a copy of it (a shallow copy of a handler with dozens of attributes, 7 µs), and
    these guards only read it."""
    for guard in handler.resolve_guards():
        await guard(connection, handler)


def roles(*names: str) -> dict[str, object]:
    return {"roles": frozenset(names)}


# --- the api_version header ---

CURRENT = "1.2"
HEADER = "api_version"


def check_api_version(connection: ASGIConnection, handler: BaseRouteHandler) -> None:
    supported = handler.opt.get("api_version", CURRENT)
    values = connection.headers.getall(HEADER, [])
    if len(values) > 1:
        raise ApiProblem(
            400,
            "api_version_repeated",
            f"the header api_version was sent {len(values)} times ({', '.join(map(repr, values))}); "
            f"send it once, as {supported}",
        )
    given = values[0] if values else None
    if given is None:
        raise ApiProblem(
            400,
            "api_version_missing",
            f"the header api_version is required; this endpoint answers to {supported}",
        )
    if given.strip() != supported:
        raise ApiProblem(
            400,
            "api_version_unsupported",
            f"api_version {quoted_text(given)} is not served by this endpoint; use {supported}",
        )
