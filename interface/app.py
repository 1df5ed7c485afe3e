"""`create_app()`: the only factory of the HTTP application, and the runtime it is wired to."""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import msgspec
from litestar import Litestar, Request, Response, get
from litestar.datastructures import State
from litestar.di import Provide
from litestar.middleware import DefineMiddleware
from litestar.serialization import default_serializer
from psycopg_pool import AsyncConnectionPool, ConnectionPool

from application.adapters.addresses import Bip32AddressBook
from application.adapters.prices import price_source_from
from application.credentials import Credentials, load_or_create_credentials, var_dir
from application.database import ensure_schema, eventsourcing_env, resolve_database_url
from application.ledger import Ledger
from application.ports import SystemClock
from application.settings import Settings, load_settings
from application.sweeper import ExpirySweeper
from interface.auth import FailedAttempts, TokenService
from interface.bodies import StrictJsonRequest
from interface.callbacks import Callbacks
from interface.controllers.alternative import ALTERNATIVE_CONTROLLERS
from interface.controllers.buys import BrokerBuyController
from interface.controllers.callbacks import TransactionCallbacksController
from interface.controllers.chain import ChainController
from interface.controllers.custodian import CustodianTransactionController
from interface.controllers.customers import CustomerController
from interface.controllers.prices import PriceController
from interface.controllers.reading import TransactionReadingController
from interface.controllers.reserves import ReserveController
from interface.controllers.sells import BrokerSellController
from interface.controllers.tokens import TokenController
from interface.idempotency import MAX_BODY, IdempotencyMiddleware, IdempotencyStore
from interface.openapi import openapi_config
from interface.problems import EXCEPTION_HANDLERS
from interface.rate_limits import RateLimitMiddleware
from interface.reading import Reader
from interface.security import UNAUTHENTICATED_PATHS, BearerAuthentication
from interface.text import StorableTextMiddleware
from projections.catalog import PROJECTIONS, READ_MODELS
from projections.runner import ProjectionWorker, open_view

log = logging.getLogger("broker_ledger")
EVENTS_SCHEMA = "ledger"
API_SCHEMA = "api"
PROJECTIONS_ENV = "BROKER_LEDGER_PROJECTIONS"  # "off": this process runs no projections


@dataclass
class Runtime:
    """Everything a running service holds: settings, the ledger, secrets and the API's own tables."""

    settings: Settings
    ledger: Ledger
    credentials: Credentials
    tokens: TokenService
    idempotency: IdempotencyStore
    pool: ConnectionPool
    database_url: str
    reader: Reader

    async def open(self) -> None:
        """Opens what lives on the server's event loop: the idempotency keys' async pool."""
        await self.idempotency.async_pool.open()

    def close(self) -> None:
        self.ledger.close()
        self.pool.close()
        self.reader.close()

    async def aclose(self) -> None:
        await self.idempotency.async_pool.close()
        self.close()


def build_runtime(database_url: str | None = None) -> Runtime:
    """Wires the service from the environment: settings file, var directory, database."""
    settings = load_settings()
    var = var_dir()
    url = database_url or resolve_database_url(var)
    ensure_schema(url, EVENTS_SCHEMA)
    clock = SystemClock()
    ledger = Ledger(
        settings,
        price_source_from(settings, clock),
        Bip32AddressBook(settings.cryptos),
        clock,
        env=eventsourcing_env(url, EVENTS_SCHEMA),
    )
    credentials = load_or_create_credentials(settings, var)
    pool_size = int(os.environ.get("BROKER_LEDGER_API_POOL_SIZE", "8"))
    # idempotency leases, callbacks, health: a request waits at most 3 s for a connection
    pool = ConnectionPool(url, min_size=1, max_size=pool_size, open=True, timeout=3)
    # the requests' claims and answers of idempotency keys, on the event loop (opened with the app); each
    # statement commits by itself, with no BEGIN and COMMIT round trips around it
    async_pool = AsyncConnectionPool(
        url, min_size=1, max_size=pool_size, open=False, timeout=3, kwargs={"autocommit": True}
    )
    idempotency = IdempotencyStore(pool, API_SCHEMA, async_pool)
    idempotency.create_table()
    return Runtime(
        settings=settings,
        ledger=ledger,
        credentials=credentials,
        tokens=TokenService(settings.tokens, credentials.signing_key, clock),
        idempotency=idempotency,
        pool=pool,
        database_url=url,
        reader=Reader(ledger, open_view(url, READ_MODELS, settings={"POSTGRES_MAX_OVERFLOW": "6"})),
    )


def projection_workers(runtime: Runtime) -> list[ProjectionWorker]:
    """A worker per projection, each running it while this process holds its lock; none when
    BROKER_LEDGER_PROJECTIONS=off (`serve --no-projections`, with `projections run` elsewhere)."""
    if os.environ.get(PROJECTIONS_ENV, "").strip().lower() == "off":
        return []
    return [ProjectionWorker(runtime.database_url, spec) for spec in PROJECTIONS]


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


@get(
    "/health",
    operation_id="health",
    tags=["Operations"],
    exclude_from_auth=True,
    sync_to_thread=True,
    security=[{}],
)
def health(state: State) -> dict[str, str]:
    """Liveness and database reachability, for load balancers and compose health checks."""
    with state.pool.connection() as conn:
        conn.execute("SELECT 1")
    return {"status": "ok"}


def allow_every_method(request: Request) -> Response | None:
    """Answers OPTIONS with every method of the path. Litestar 2 lists only the first handler registered on
    a path (litestar-org/litestar#4169, fixed in 3), e.g. PUT but not GET for /customer/{code}."""
    if request.method != "OPTIONS":
        return None
    paths = request.route_handler.paths
    methods = {method for route in request.app.routes if route.path in paths for method in route.methods}
    return Response(None, status_code=204, headers={"Allow": ", ".join(sorted(methods))})


def create_app(runtime: Runtime | None = None) -> Litestar:
    """The HTTP application. Without a runtime (as a server worker's factory) it wires one itself."""
    runtime = runtime or build_runtime()
    sweeper = ExpirySweeper(runtime.ledger, float(os.environ.get("BROKER_LEDGER_EXPIRY_SWEEP_SECONDS", "15")))
    workers = projection_workers(runtime)
    callbacks = Callbacks(
        runtime.settings, runtime.pool, runtime.database_url, runtime.credentials.callback_secret
    )
    return Litestar(
        route_handlers=[
            health,
            TokenController,
            CustomerController,
            BrokerBuyController,
            BrokerSellController,
            CustodianTransactionController,
            ChainController,
            PriceController,
            TransactionReadingController,
            TransactionCallbacksController,
            ReserveController,
            *ALTERNATIVE_CONTROLLERS,
        ],
        dependencies={
            "ledger": Provide(lambda: runtime.ledger, use_cache=True, sync_to_thread=False),
            "reader": Provide(lambda: runtime.reader, use_cache=True, sync_to_thread=False),
        },
        middleware=[
            StorableTextMiddleware(),  # first: no text the ledger cannot store reaches anything else
            DefineMiddleware(BearerAuthentication, exclude=UNAUTHENTICATED_PATHS),
            RateLimitMiddleware(runtime.settings.rate_limits),  # after authentication: keyed by client
            IdempotencyMiddleware(),
        ],
        exception_handlers=EXCEPTION_HANDLERS,
        before_request=allow_every_method,
        request_class=StrictJsonRequest,
        response_class=LedgerResponse,
        openapi_config=openapi_config(),
        request_max_body_size=MAX_BODY,
        state=State(
            {
                "settings": runtime.settings,
                "tokens": runtime.tokens,
                "credentials": runtime.credentials,
                "idempotency": runtime.idempotency,
                "pool": runtime.pool,
                "failed_attempts": FailedAttempts(),
                "runtime": runtime,
                "callbacks": callbacks,
            }
        ),
        on_startup=[runtime.open, sweeper.start, callbacks.start, *(worker.start for worker in workers)],
        on_shutdown=[callbacks.stop, *(worker.stop for worker in workers), sweeper.stop, runtime.aclose],
        debug=False,
    )
