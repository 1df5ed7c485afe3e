"""`create_app()`: the only factory of the HTTP application, and the runtime it is wired to."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from typing import Any

from litestar import Litestar, Router
from litestar.datastructures import State
from litestar.di import Provide
from litestar.middleware import DefineMiddleware
from litestar.template import TemplateConfig
from psycopg_pool import AsyncConnectionPool, ConnectionPool

from application.adapters.addresses import Bip32AddressBook
from application.adapters.prices import price_source_from
from application.credentials import Credentials, load_or_create_credentials
from application.ledger import Ledger
from application.orders import OrderDesk
from application.ports import Clock, SystemClock
from application.settings import Settings
from application.store.database import (
    IDLE_SECONDS,
    RECONNECT_SECONDS,
    api_pools,
    check_if_stale_async,
    checked_pool,
    ensure_schema,
    eventsourcing_env,
    note_use_async,
    pool_settings,
    resolve_database_url,
    tagged,
)
from application.store.hung_servers import TrackedAsyncConnection
from application.sweeper import ExpirySweeper
from application.use_cases import UseCases
from interface.api_document.openapi import openapi_config
from interface.console.sessions import ConsoleSessions, SessionRecords
from interface.environment import PROJECTIONS_ENV as PROJECTIONS_ENV  # where tests and tools import it from
from interface.environment import Environment
from interface.events.feed import EventsFeed
from interface.features import FEATURES
from interface.http.auth import FailedAttempts, TokenService
from interface.http.bodies import StrictJsonRequest
from interface.http.body_checks import BodyChecks
from interface.http.heavy_reads import HeavyReads, HeavyReadsMiddleware, heavy_pools
from interface.http.observability import ObservedLitestar, metrics
from interface.http.problems import EXCEPTION_HANDLERS
from interface.http.rate_limits import RateLimitMiddleware
from interface.http.read_your_writes import (
    ON_READ_SERVERS,
    ReadPools,
    ReadYourWritesMiddleware,
    WritePositions,
)
from interface.http.request_head import StorableTextMiddleware
from interface.http.responses import LedgerResponse, allow_every_method
from interface.http.security import UNAUTHENTICATED_PATHS, BearerAuthentication
from interface.http.settings import ApiSettings, load_service_settings
from interface.idempotency.keys import MAX_BODY, IdempotencyStore
from interface.idempotency.middleware import IdempotencyMiddleware
from interface.shared.feature import Feature
from interface.shared.reserve_reading import ReserveReader
from interface.shared.token_issuance import TokenIssuance
from interface.shared.transaction_reading import Reader
from interface.transactions.callback_bodies import renderer
from projections.analyst_schema import prepare as prepare_analyst_schema
from projections.base.runner import open_view
from projections.callbacks.service import Callbacks
from projections.callbacks.urls import CallbackUrlPolicy
from projections.catalog import PROJECTIONS, READ_MODELS
from projections.dimensions import Dimensions
from projections.live import ProjectionWorker, stop_all

log = logging.getLogger("broker_ledger")
EVENTS_SCHEMA = "ledger"
API_SCHEMA = "api"
USE_CASE_THREADS = 32  # per worker: as many use cases as its share of 64 connections, at once


@dataclass
class Runtime:
    """Everything a running service holds: settings, the ledger and its use cases, secrets and the API's own
    tables."""

    settings: Settings
    api_settings: ApiSettings
    ledger: Ledger
    use_cases: UseCases  # composed once on the ledger; the routes are handed them (`create_app`)
    credentials: Credentials
    tokens: TokenService
    idempotency: IdempotencyStore
    pool: ConnectionPool
    database_url: str
    reader: Reader
    write_positions: WritePositions
    environment: Environment  # what the process was started with, read once (`interface.environment`)
    console_sessions: ConsoleSessions  # the console's sessions, recorded in the API's schema
    failed_attempts: FailedAttempts  # of the token endpoint and the console's sign-in, in this process
    issuance: TokenIssuance  # a secret checked, a token issued: the token endpoint's and the console's
    body_checks: BodyChecks  # every feature's bodies' content checks, on the use cases
    heavy_reads: HeavyReads  # a partner's heavy reads at once
    heavy_pools: ReadPools  # the heavy reads' connections, never the API's
    reserve_reader: ReserveReader  # the reserves and postings after the caller's writes
    callbacks: Callbacks  # the callbacks' deliveries and their worker
    sweeper: ExpirySweeper  # lapses overdue transactions
    workers: list[ProjectionWorker]  # the projections this process runs (none with them off)
    events_feed: EventsFeed  # GET /events: its reads, and the one waker of the requests that wait
    read_url: str | None = None  # the read servers' (BROKER_LEDGER_READ_DATABASE_URL); None: the primary
    read_pool: ConnectionPool | None = None  # the API pool's counterpart there, for the reserves

    @property
    def projection_names(self) -> tuple[str, ...]:
        """Every projection's name, whether this process runs it or not (health, metrics, the console)."""
        return tuple(spec.name for spec in PROJECTIONS)

    async def open(self) -> None:
        """Opens what lives on the server's event loop: the idempotency keys' async pool."""
        await self.idempotency.async_pool.open()

    def on_startup(self) -> list[Callable[[], Any]]:
        """What the app starts, in order: the async pool, the sweeper, the callbacks, the projections."""
        workers = [worker.start for worker in self.workers]
        return [self.open, self.sweeper.start, self.callbacks.start, *workers]

    def on_shutdown(self) -> list[Callable[[], Any]]:
        """What the app stops, in order: the callbacks, the projections, the sweeper, then the connections."""
        return [
            self.events_feed.close,  # the requests waiting for news answer what they have
            self.callbacks.stop,
            partial(stop_all, self.workers),
            self.sweeper.stop,
            self.aclose,
            partial(self.heavy_pools.close, 5.0),  # (litestar would hand a bare `close` the app)
        ]

    def close(self) -> None:
        self.ledger.close()
        self.pool.close()
        if self.read_pool is not None:
            self.read_pool.close()
        self.reader.close()

    def pools(self) -> dict[str, Any]:
        """The connection pools of this process, by what they serve (for GET /metrics); those on the read
        servers begin with ON_READ_SERVERS."""
        found = {
            "event_store": self.ledger.datastore.pool,
            "api": self.pool,
            "idempotency": self.idempotency.async_pool,
            "read_models": self.reader.primary_view.datastore.pool,
        }
        if self.reader.primary is not None:
            found[f"{ON_READ_SERVERS}_read_models"] = self.reader.view.datastore.pool
        if self.read_pool is not None:
            found[f"{ON_READ_SERVERS}_api"] = self.read_pool
        return found

    async def aclose(self) -> None:
        await self.idempotency.async_pool.close()
        self.close()


def build_runtime(
    database_url: str | None = None, ledger_clock: Clock | None = None, environment: Environment | None = None
) -> Runtime:
    """Wires the service from `environment` (read here when not given): settings file, var directory,
    database (`database_url` rather than the environment's, in tests). `ledger_clock` (tests) sets the
    ledger's time only: prices, tokens and the rest keep the system's."""
    environment = environment or Environment.read()
    loaded = load_service_settings(environment.settings_file)
    settings = loaded.ledger
    var = environment.var_dir
    url = environment.libpq.complete(database_url or resolve_database_url(var, environment.database_url))
    url = tagged(url, "api")  # the name of this process's connections outside its pools
    ensure_schema(url, EVENTS_SCHEMA)
    sizes = api_pools(environment.connections)  # shared out; each pool connects only as it needs
    clock = SystemClock()
    ledger = Ledger(
        settings,
        ledger_clock or clock,
        env=eventsourcing_env(
            url, EVENTS_SCHEMA, connections=environment.connections, group_commit=environment.group_commit
        ),
    )
    use_cases = UseCases.of(
        ledger,
        price_source_from(settings, clock),
        Bip32AddressBook(settings.cryptos),
        callback_urls=CallbackUrlPolicy(settings.callback_http_hosts),  # a requested URL's host resolved
    )
    credentials = load_or_create_credentials(loaded, var, token_key=environment.token_key)
    pool = checked_pool(url, sizes.api, "api")  # idempotency leases, callbacks, health, the reserves
    # the requests' claims and answers of idempotency keys, on the event loop (opened with the app); each
    # statement commits by itself, with no BEGIN and COMMIT round trips around it
    async_pool = AsyncConnectionPool(
        tagged(url, "idempotency"),
        min_size=0,
        max_size=sizes.idempotency,
        open=False,
        timeout=3,
        max_idle=IDLE_SECONDS,
        reconnect_timeout=RECONNECT_SECONDS,
        connection_class=TrackedAsyncConnection,
        kwargs={"autocommit": True},
        check=check_if_stale_async,
        reset=note_use_async,
    )
    # claims and answers ride in the group committer's transactions (none of their own); with the library's
    # recorder (BROKER_LEDGER_GROUP_COMMIT=off) they go on the async pool
    along_events = ledger.write_along
    ledger.read_on_loop(async_pool)  # use cases on the loop read ahead on it (`LedgerStore.run`)
    idempotency = IdempotencyStore(pool, API_SCHEMA, async_pool, along_events)
    idempotency.create_table()
    write_positions = WritePositions(pool, async_pool, API_SCHEMA)
    write_positions.create_table()
    console_records = SessionRecords(pool, async_pool, API_SCHEMA, clock)
    console_records.create_table()
    write_positions.kept_with_events(ledger)  # no statement of its own per write
    read_url = environment.read_servers_url
    read_pool = None if read_url is None else checked_pool(read_url, sizes.api, f"{ON_READ_SERVERS} api")
    tokens = TokenService(loaded.api.tokens, credentials.signing_key, clock)
    failed_attempts = FailedAttempts()
    issuance = TokenIssuance(credentials, tokens, failed_attempts)
    heavy = loaded.api.heavy_reads
    heavy_connections = heavy_pools(url, read_url, sizes.heavy_reads)  # never the API's
    callbacks = Callbacks(
        pool,
        url,
        credentials.callback_secret,
        renderer(settings),
        settings.callback_http_hosts,
        config=environment.delivery,
        secret_key=credentials.callback_key,  # rotated secrets: the same in every process (var/)
    )
    reader = read_models_reader(ledger, url, read_url, sizes.read_models, write_positions)
    prepare_analyst_schema(url, Dimensions.of(settings))  # dimensions, fee revenue, comments (analytics.md)
    return Runtime(
        settings=settings,
        api_settings=loaded.api,
        ledger=ledger,
        use_cases=use_cases,
        credentials=credentials,
        tokens=tokens,
        idempotency=idempotency,
        pool=pool,
        database_url=url,
        reader=reader,
        write_positions=write_positions,
        environment=environment,
        console_sessions=ConsoleSessions(console_records, environment.console_address, issuance),
        failed_attempts=failed_attempts,
        issuance=issuance,
        body_checks=body_checks(use_cases, FEATURES),
        heavy_reads=HeavyReads(heavy.per_partner, heavy.wait_seconds),
        heavy_pools=heavy_connections,
        # the reserves now on the read servers' pool first when set, then the API's
        reserve_reader=ReserveReader(
            settings, ReadPools(pool, read_pool), write_positions, heavy_pools=heavy_connections
        ),
        callbacks=callbacks,
        sweeper=ExpirySweeper(ledger, use_cases.settlement, environment.expiry_sweep_seconds),
        workers=projection_workers(environment, url),
        events_feed=EventsFeed.of(ledger, reader.primary_view, write_positions),
        read_url=read_url,
        read_pool=read_pool,
    )


def read_models_reader(
    ledger: Ledger, url: str, read_url: str | None, size: int, positions: WritePositions
) -> Reader:
    """The reader of the read models: on the primary's view (which creates their tables); with read servers
    (`read_url`), on theirs first, opened without creating anything (a standby takes no DDL), the primary's
    view then reading the partners' last writes and serving what the read servers cannot give in time."""
    primary = open_view(url, READ_MODELS, settings=pool_settings(size, "read-models", checked=True))
    if read_url is None:
        return Reader(ledger, primary, positions)
    settings = pool_settings(size, f"{ON_READ_SERVERS} read-models", checked=True)
    standby = open_view(read_url, READ_MODELS, settings=settings, create_tables=False)
    return Reader(ledger, standby, positions, primary=primary)


def projection_workers(environment: Environment, database_url: str) -> list[ProjectionWorker]:
    """The worker running every projection whose lock this process holds; none when
    BROKER_LEDGER_PROJECTIONS=off (`serve --no-projections`, with `projections run` elsewhere)."""
    if not environment.run_projections:
        return []
    checkpointer = environment.checkpointer()  # signs the Merkle tree's checkpoints while it leads the tree
    return [
        ProjectionWorker(
            database_url, PROJECTIONS, page=environment.projection_page, checkpointer=checkpointer
        )
    ]


async def use_case_threads() -> None:
    """Gives the event loop USE_CASE_THREADS threads for the use cases (litestar runs sync handlers in the
    loop's default executor, otherwise of cpu_count + 4 threads). A use case's thread mostly waits for its
    save, so with more of them more saves wait together and the group committer writes them in fewer,
    larger transactions: fewer commits, round trips and statements per buy, in the worker and PostgreSQL."""
    executor = ThreadPoolExecutor(max_workers=USE_CASE_THREADS, thread_name_prefix="use-case")
    asyncio.get_running_loop().set_default_executor(executor)


def dependencies(runtime: Runtime) -> dict[str, Provide]:
    """What the routes are handed by name (`interface.http.dependencies`): each feature's use cases, the
    ledger's settings and clock, the readers of the read models, the token issuance, the callbacks'
    deliveries, the heavy reads, what health and metrics read and the console's sessions; all built once
    (`build_runtime`), but the order desk, new for each request (it checks a requested callback URL once for
    the request). This is the one way a route is given anything: no module but this one reads the app's
    state."""
    use_cases = runtime.use_cases

    def new_desk() -> OrderDesk:
        return use_cases.desk

    once = {
        "settings": runtime.settings,
        "clock": runtime.ledger.clock,
        "reader": runtime.reader,
        "customers": use_cases.customers,
        "limits": use_cases.limits,
        "buys": use_cases.buys,
        "sells": use_cases.sells,
        "settlement": use_cases.settlement,
        "resolutions": use_cases.resolutions,
        "alternative": use_cases.alternative,
        "reserves": use_cases.reserves,
        "history": use_cases.history,
        "sessions": runtime.console_sessions,  # the console's pages
        "issuance": runtime.issuance,
        "reserve_reader": runtime.reserve_reader,
        "events_feed": runtime.events_feed,
        "deliveries": runtime.callbacks.store,
        "secret_rotations": runtime.callbacks.rotations,  # the partners' callback secrets rotated
        "heavy_reads": runtime.heavy_reads,
        "heavy_pools": runtime.heavy_pools,
        "write_positions": runtime.write_positions,
        "ledger": runtime.ledger,  # health and the console's system page: the committer, the log's head
        "api_pool": runtime.pool,
        "projection_names": runtime.projection_names,
        "stall_seconds": runtime.environment.stall_seconds,
        "metrics_dir": runtime.environment.metrics_dir,
        "pools": runtime.pools,
    }
    return {
        **{name: _provided(value) for name, value in once.items()},
        "desk": Provide(new_desk, sync_to_thread=False),
    }


def _provided(value: Any) -> Provide:
    """`value`, handed to every route that names it."""

    def given() -> Any:
        return value

    return Provide(given, use_cache=True, sync_to_thread=False)


def create_app(runtime: Runtime | None = None, environment: Environment | None = None) -> Litestar:
    """The HTTP application. Without a runtime (as a server worker's factory) it wires one itself, from
    `environment` (read then when not given)."""
    runtime = runtime or build_runtime(environment=environment)
    return ObservedLitestar(
        route_handlers=[
            metrics,
            *(handler for feature in FEATURES for handler in feature.route_handlers),
            # the routes that may be heavy reads: a partner's slots taken around them, and only them (a buy
            # never passes the middleware)
            Router(
                "/",
                route_handlers=[handler for feature in FEATURES for handler in feature.heavy_reads],
                middleware=[HeavyReadsMiddleware(runtime.heavy_reads)],
            ),
        ],
        dependencies=dependencies(runtime),
        middleware=[
            StorableTextMiddleware(),  # first: no text the ledger cannot store reaches anything else
            DefineMiddleware(BearerAuthentication, tokens=runtime.tokens, exclude=UNAUTHENTICATED_PATHS),
            RateLimitMiddleware(runtime.api_settings.rate_limits),  # after authentication: keyed by client
            # keeps a write's position before its answer (also a stored one)
            ReadYourWritesMiddleware(runtime.write_positions),
            IdempotencyMiddleware(runtime.idempotency),
        ],
        exception_handlers=exception_handlers(FEATURES),
        before_request=allow_every_method,
        request_class=StrictJsonRequest.checked_by(runtime.body_checks),
        response_class=LedgerResponse,
        openapi_config=openapi_config(FEATURES, runtime.settings),
        template_config=template_config(FEATURES),
        logging_config=None,  # the process's own (application/logs.py): litestar's would replace the root's
        request_max_body_size=MAX_BODY,
        # the runtime, for tests and tools that look into a running app: no module of the app reads it
        state=State({"runtime": runtime}),
        on_startup=[use_case_threads, *runtime.on_startup()],
        on_shutdown=runtime.on_shutdown(),
        debug=False,
    )


def body_checks(use_cases: UseCases, features: Sequence[Feature]) -> BodyChecks:
    """The content checks of every feature's bodies, on the use cases (`interface.http.bodies` runs them on a
    body that broke its schema)."""
    return BodyChecks(
        use_cases,
        {body: check for feature in features for body, check in feature.body_checks.items()},
    )


def exception_handlers(features: Sequence[Feature]) -> dict[Any, Any]:
    """The app's handlers of what happens before a route is found (every refusal a problem), as the features
    with pages of their own wrap them (the console answers a page under /console)."""
    handlers = dict(EXCEPTION_HANDLERS)
    for feature in features:
        if feature.exception_handlers is not None:
            handlers = feature.exception_handlers(handlers)
    return handlers


def template_config(features: Sequence[Feature]) -> TemplateConfig | None:
    """The templates of the one feature that has pages (the console), if any."""
    configs = [feature.templates() for feature in features if feature.templates is not None]
    if len(configs) > 1:
        raise ValueError(f"{len(configs)} features give templates; the app takes one directory of them")
    return configs[0] if configs else None
