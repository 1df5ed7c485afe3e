"""`create_app()`: the only factory of the HTTP application, and the runtime it is wired to."""

from __future__ import annotations

import asyncio
import logging
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from decimal import Decimal
from functools import partial
from typing import Any

import msgspec
from litestar import Litestar, Request, Response
from litestar.datastructures import State
from litestar.di import Provide
from litestar.middleware import DefineMiddleware
from litestar.serialization import default_serializer
from psycopg_pool import AsyncConnectionPool, ConnectionPool

from application.adapters.addresses import Bip32AddressBook
from application.adapters.prices import price_source_from
from application.credentials import Credentials, load_or_create_credentials, var_dir
from application.ledger import Ledger
from application.ports import Clock, SystemClock
from application.settings import Settings
from application.store.database import (
    IDLE_SECONDS,
    api_pools,
    check_if_stale,
    check_if_stale_async,
    ensure_schema,
    eventsourcing_env,
    note_use,
    note_use_async,
    pool_settings,
    resolve_database_url,
    tagged,
)
from application.sweeper import ExpirySweeper
from interface.auth import FailedAttempts, TokenService
from interface.bodies import StrictJsonRequest
from interface.callbacks import renderer
from interface.controllers.alternative import ALTERNATIVE_CONTROLLERS
from interface.controllers.buys import BrokerBuyController
from interface.controllers.callbacks import TransactionCallbacksController
from interface.controllers.chain import ChainController
from interface.controllers.custodian import CustodianTransactionController
from interface.controllers.customers import CustomerController
from interface.controllers.health import health, liveness
from interface.controllers.prices import PriceController
from interface.controllers.reading import TransactionReadingController
from interface.controllers.reserves import ReserveController
from interface.controllers.sells import BrokerSellController
from interface.controllers.tokens import TokenController
from interface.idempotency import MAX_BODY, IdempotencyStore
from interface.idempotent_requests import IdempotencyMiddleware
from interface.observability import ObservedLitestar, metrics
from interface.openapi import openapi_config
from interface.problems import EXCEPTION_HANDLERS
from interface.rate_limits import RateLimitMiddleware
from interface.read_your_writes import ReadYourWritesMiddleware, WritePositions
from interface.reading import Reader
from interface.security import UNAUTHENTICATED_PATHS, BearerAuthentication
from interface.settings import ApiSettings, load_service_settings
from interface.text import StorableTextMiddleware
from projections.callbacks.service import Callbacks
from projections.callbacks.urls import CallbackUrlPolicy
from projections.catalog import PROJECTIONS, READ_MODELS
from projections.live import ProjectionWorker, stop_all
from projections.runner import open_view

log = logging.getLogger("broker_ledger")
EVENTS_SCHEMA = "ledger"
API_SCHEMA = "api"
PROJECTIONS_ENV = "BROKER_LEDGER_PROJECTIONS"  # "off": this process runs no projections
USE_CASE_THREADS = 32  # per worker: as many use cases as its share of 64 connections, at once


@dataclass
class Runtime:
    """Everything a running service holds: settings, the ledger, secrets and the API's own tables."""

    settings: Settings
    api_settings: ApiSettings
    ledger: Ledger
    credentials: Credentials
    tokens: TokenService
    idempotency: IdempotencyStore
    pool: ConnectionPool
    database_url: str
    reader: Reader
    write_positions: WritePositions

    async def open(self) -> None:
        """Opens what lives on the server's event loop: the idempotency keys' async pool."""
        await self.idempotency.async_pool.open()

    def close(self) -> None:
        self.ledger.close()
        self.pool.close()
        self.reader.close()

    def pools(self) -> dict[str, Any]:
        """The connection pools of this process, by what they serve (for GET /metrics)."""
        return {
            "event_store": self.ledger.recorder.datastore.pool,
            "api": self.pool,
            "idempotency": self.idempotency.async_pool,
            "read_models": self.reader.view.datastore.pool,
        }

    async def aclose(self) -> None:
        await self.idempotency.async_pool.close()
        self.close()


def build_runtime(database_url: str | None = None, ledger_clock: Clock | None = None) -> Runtime:
    """Wires the service from the environment: settings file, var directory, database. `ledger_clock`
    (tests) sets the ledger's time only: prices, tokens and the rest keep the system's."""
    loaded = load_service_settings()
    settings = loaded.ledger
    var = var_dir()
    url = database_url or resolve_database_url(var)
    url = tagged(url, "api")  # the name of this process's connections outside its pools
    ensure_schema(url, EVENTS_SCHEMA)
    sizes = api_pools()  # BROKER_LEDGER_DB_CONNECTIONS, shared out; each pool connects only as it needs
    clock = SystemClock()
    ledger = Ledger(
        settings,
        price_source_from(settings, clock),
        Bip32AddressBook(settings.cryptos),
        ledger_clock or clock,
        env=eventsourcing_env(url, EVENTS_SCHEMA),
        callback_urls=CallbackUrlPolicy(settings.callback_http_hosts),  # a requested URL's host resolved
    )
    credentials = load_or_create_credentials(loaded, var)
    # idempotency leases, callbacks, health: a request waits at most 3 s for a connection, checked before
    # use when it was idle (`check_if_stale`), so a database restart does not fail the next requests on dead
    # connections and a busy pool pays no round trip per loan
    pool = ConnectionPool(
        tagged(url, "api"),
        min_size=0,
        max_size=sizes.api,
        open=True,
        timeout=3,
        max_idle=IDLE_SECONDS,
        check=check_if_stale,
        reset=note_use,
    )
    # the requests' claims and answers of idempotency keys, on the event loop (opened with the app); each
    # statement commits by itself, with no BEGIN and COMMIT round trips around it
    async_pool = AsyncConnectionPool(
        tagged(url, "idempotency"),
        min_size=0,
        max_size=sizes.idempotency,
        open=False,
        timeout=3,
        max_idle=IDLE_SECONDS,
        kwargs={"autocommit": True},
        check=check_if_stale_async,
        reset=note_use_async,
    )
    # claims and answers ride in the group committer's transactions (none of their own); with the library's
    # recorder (BROKER_LEDGER_GROUP_COMMIT=off) they go on the async pool
    along_events = getattr(ledger.recorder, "write_along", None)
    idempotency = IdempotencyStore(pool, API_SCHEMA, async_pool, along_events)
    idempotency.create_table()
    write_positions = WritePositions(pool, async_pool, API_SCHEMA)
    write_positions.create_table()
    write_positions.kept_with_events(ledger.recorder)  # no statement of its own per write
    return Runtime(
        settings=settings,
        api_settings=loaded.api,
        ledger=ledger,
        credentials=credentials,
        tokens=TokenService(loaded.api.tokens, credentials.signing_key, clock),
        idempotency=idempotency,
        pool=pool,
        database_url=url,
        reader=Reader(
            ledger,
            open_view(
                url, READ_MODELS, settings=pool_settings(sizes.read_models, "read-models", checked=True)
            ),
            write_positions,
        ),
        write_positions=write_positions,
    )


def projection_workers(runtime: Runtime) -> list[ProjectionWorker]:
    """The worker running every projection whose lock this process holds; none when
    BROKER_LEDGER_PROJECTIONS=off (`serve --no-projections`, with `projections run` elsewhere)."""
    if os.environ.get(PROJECTIONS_ENV, "").strip().lower() == "off":
        return []
    return [ProjectionWorker(runtime.database_url, PROJECTIONS)]


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


async def use_case_threads() -> None:
    """Gives the event loop USE_CASE_THREADS threads for the use cases (litestar runs sync handlers in the
    loop's default executor, otherwise of cpu_count + 4 threads). A use case's thread mostly waits for its
    save, so with more of them more saves wait together and the group committer writes them in fewer,
    larger transactions: fewer commits, round trips and statements per buy, in the worker and PostgreSQL."""
    executor = ThreadPoolExecutor(max_workers=USE_CASE_THREADS, thread_name_prefix="use-case")
    asyncio.get_running_loop().set_default_executor(executor)


def create_app(runtime: Runtime | None = None) -> Litestar:
    """The HTTP application. Without a runtime (as a server worker's factory) it wires one itself."""
    runtime = runtime or build_runtime()
    sweeper = ExpirySweeper(runtime.ledger, float(os.environ.get("BROKER_LEDGER_EXPIRY_SWEEP_SECONDS", "15")))
    workers = projection_workers(runtime)
    callbacks = Callbacks(
        runtime.pool,
        runtime.database_url,
        runtime.credentials.callback_secret,
        renderer(runtime.settings),
        runtime.settings.callback_http_hosts,
    )
    return ObservedLitestar(
        route_handlers=[
            health,
            liveness,
            metrics,
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
            RateLimitMiddleware(runtime.api_settings.rate_limits),  # after authentication: keyed by client
            ReadYourWritesMiddleware(),  # keeps a write's position before its answer (also a stored one)
            IdempotencyMiddleware(),
        ],
        exception_handlers=EXCEPTION_HANDLERS,
        before_request=allow_every_method,
        request_class=StrictJsonRequest,
        response_class=LedgerResponse,
        openapi_config=openapi_config(),
        logging_config=None,  # the process's own (application/logs.py): litestar's would replace the root's
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
                "projection_names": [spec.name for spec in PROJECTIONS],
                "pools": runtime.pools,
                "write_positions": runtime.write_positions,
            }
        ),
        on_startup=[
            use_case_threads,
            runtime.open,
            sweeper.start,
            callbacks.start,
            *(worker.start for worker in workers),
        ],
        on_shutdown=[callbacks.stop, partial(stop_all, workers), sweeper.stop, runtime.aclose],
        debug=False,
    )
