"""What every controller shares: documented error responses, headers, the caller's identity, the
dependencies it is handed by name (its feature's use cases, the settings and the clock), and the request's
unit of work, which the middleware opens in the ASGI scope's state (`open_unit_of_work`) and the
route hands to its use case (`unit_of`)."""

from __future__ import annotations

from decimal import Decimal
from typing import Annotated, Any

import msgspec
from litestar import Request, Response
from litestar.di import NamedDependency
from litestar.openapi.datastructures import ResponseSpec
from litestar.openapi.spec import Example
from litestar.params import HeaderParameter, Parameter, SkipValidation
from litestar.serialization import default_serializer
from litestar.types import Scope

from application.alternative import AlternativeFlows
from application.buys import Buys
from application.customers import Customers
from application.history import History
from application.limits import Limits
from application.orders import OrderDesk
from application.ports import Clock
from application.reserves import Reserves
from application.sells import Sells
from application.settings import Settings
from application.settlement import Settlement
from application.store.request_writes import RequestWrites
from interface.http.auth import Principal
from interface.http.problems import PROBLEM_JSON, TITLES
from interface.http.security import CURRENT, HEADER
from interface.http.shapes import CODE_PATTERN, Problem

# What a route is handed by name (`create_app` provides each): the ledger's settings and clock, and the use
# cases of its feature (`application.use_cases`), which it calls directly.
SettingsDep = NamedDependency[Settings]
ClockDep = NamedDependency[SkipValidation[Clock]]  # a Protocol, which no isinstance check can take
CustomersDep = NamedDependency[Customers]
LimitsDep = NamedDependency[Limits]
BuysDep = NamedDependency[Buys]
SellsDep = NamedDependency[Sells]
SettlementDep = NamedDependency[Settlement]
AlternativeDep = NamedDependency[AlternativeFlows]
ReservesDep = NamedDependency[Reserves]
HistoryDep = NamedDependency[History]
DeskDep = NamedDependency[OrderDesk]
UNIT_OF_WORK = "unit_of_work"  # where a request's unit of work is in its ASGI scope's state
IdempotencyKey = Annotated[
    str | None,
    HeaderParameter(
        name="Idempotency-Key",
        required=False,
        min_length=1,
        max_length=255,
        description="Retry-safe key: the same key and body within 24 h replays the first response",
    ),
]


def code_parameter(description: str, example: str | None = None) -> Parameter:
    """A path segment naming a customer or transaction, with the same rules as codes in bodies."""
    examples = [Example(value=example)] if example else None
    return Parameter(
        description=description, min_length=1, max_length=64, pattern=CODE_PATTERN, examples=examples
    )


def problems(*statuses: int) -> dict[int, ResponseSpec]:
    """The problem+json responses of a route's own refusals, for the API document (the ones every route
    can give, such as 400, 401 or 503, are added to the document by `interface.api_document.openapi`)."""
    return {
        status: ResponseSpec(
            data_container=Problem,
            description=TITLES.get(status, "Error"),
            media_type=PROBLEM_JSON,
            generate_examples=False,
        )
        for status in sorted(statuses)
    }


def version_header(version: str = CURRENT) -> dict[str, Any]:
    return {
        "api_version": HeaderParameter(
            annotation=str,
            name=HEADER,
            required=True,
            # an enum of one rather than a `const`: generators (openapi-python-client) make a Literal of a
            # const, which they cannot send as a header
            default=version,
            schema_extra={"enum": [version]},
            description=f"API version; this endpoint answers to {version}",
        )
    }


def principal(request: Request) -> Principal:
    return request.user


def open_unit_of_work(scope: Scope, partner: str) -> RequestWrites:
    """The request's unit of work: the one a middleware before opened, or a new one, put in the scope's
    state for the middleware after and the route (`ReadYourWritesMiddleware` opens it, the
    `IdempotencyMiddleware` puts its key's claim on it)."""
    state = scope.setdefault("state", {})
    unit = state.get(UNIT_OF_WORK)
    if unit is None:
        unit = state[UNIT_OF_WORK] = RequestWrites(partner)
    return unit


def unit_of(request: Request) -> RequestWrites | None:
    """The request's unit of work, which the route hands to the use case it calls: every save of the use
    case joins it. None for a request that writes nothing of a partner (a GET, a route without a token)."""
    state = request.scope.get("state")
    return state.get(UNIT_OF_WORK) if state is not None else None


# --- every answer and every OPTIONS request ---


JSON_ENCODER = msgspec.json.Encoder(enc_hook=default_serializer, decimal_format="number")


def positional(value: Any) -> Any:
    """Decimal amounts as JSON numbers in positional notation (0.00000000 rather than 0E-8), exact."""
    if isinstance(value, Decimal):
        return msgspec.Raw(format(value, "f").encode())
    if isinstance(value, dict):
        return {key: positional(item) for key, item in value.items()}
    if isinstance(value, list):
        return [positional(item) for item in value]
    return value


class LedgerResponse(Response):
    """Writes Decimal amounts as JSON numbers, exact to the last digit (litestar would write strings)."""

    def render(self, content: Any, media_type: str, enc_hook: Any = default_serializer) -> bytes:
        if not isinstance(content, bytes | str) and "json" in media_type:
            plain = msgspec.to_builtins(content, builtin_types=(Decimal,), enc_hook=enc_hook)
            return JSON_ENCODER.encode(positional(plain))
        return super().render(content, media_type, enc_hook)


async def allow_every_method(request: Request) -> Response | None:
    """Answers OPTIONS with every method of the path. Litestar 2 lists only the first handler registered on
    a path (litestar-org/litestar#4169, fixed in 3), e.g. PUT but not GET for /customer/{code}. A coroutine:
    litestar runs a plain function hook in a worker thread, a thread hop for every request."""
    if request.method != "OPTIONS":
        return None
    paths = request.route_handler.paths
    methods = {method for route in request.app.routes if route.path in paths for method in route.methods}
    return Response(None, status_code=204, headers={"Allow": ", ".join(sorted(methods))})
