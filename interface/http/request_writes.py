"""The request's writes (`RequestWrites`: its write position, the statements riding with its first save, and
who the request is by, recorded with its events),
which the middleware opens in the ASGI scope's state (`open_unit_of_work`) and the route hands to its use case
(`unit_of`)."""

from __future__ import annotations

from litestar import Request
from litestar.types import Scope

from application.store.actors import Actor, http_actor
from application.store.request_writes import RequestWrites
from interface.http.request_ids import request_id_of

UNIT_OF_WORK = "unit_of_work"  # where a request's unit of work is in its ASGI scope's state


def open_unit_of_work(scope: Scope, partner: str) -> RequestWrites:
    """The request's unit of work: the one a middleware before opened, or a new one, put in the scope's
    state for the middleware after and the route (`ReadYourWritesMiddleware` opens it, the
    `IdempotencyMiddleware` puts its key's claim on it)."""
    state = scope.setdefault("state", {})
    unit = state.get(UNIT_OF_WORK)
    if unit is None:
        unit = state[UNIT_OF_WORK] = RequestWrites(partner, actor_of(scope))
    return unit


def actor_of(scope: Scope) -> Actor | None:
    """Who the request's events are by: its client, the client's roles and the request's id (the
    `X-Request-Id` of its answer); None without an authenticated client."""
    principal = scope.get("user")
    if principal is None:
        return None
    return http_actor(principal.client_id, principal.roles, request_id_of(scope))


def unit_of(request: Request) -> RequestWrites | None:
    """The request's unit of work, which the route hands to the use case it calls: every save of the use
    case joins it. None for a request that writes nothing of a partner (a GET, a route without a token)."""
    state = request.scope.get("state")
    return state.get(UNIT_OF_WORK) if state is not None else None
