"""The process's environment variables, read once at start into one typed, immutable `Environment`.

Every product module that needs what an operator sets in the environment gets it handed in, as a plain
parameter, by the process's composition root: `interface.app.build_runtime` for the HTTP service, and each
command of the command line (`interface.cli`) for itself. Those call `Environment.read()`; nothing else reads
the environment, and this module is the only one that writes it (`hand_down`, `name_connections`): `serve`
tells its worker processes what it decided, which they read back as their own environment.

The variables, each with its field, its default, and what it does:

- `BROKER_LEDGER_SETTINGS` (`settings_file`, default the demo settings): the settings file.
- `BROKER_LEDGER_VAR` (`var_dir`, default `var`): the var directory, with the generated secrets and the
  embedded server's data.
- `BROKER_LEDGER_TOKEN_KEY` (`token_key`, default none: the key stored in the var directory): the token
  signing key, base64 of at least 32 bytes.
- `DATABASE_URL` (`database_url`, default none: the embedded server): the PostgreSQL server, as a URL or a
  key=value string.
- `PGUSER`, `PGDATABASE`, `PGHOST`, `PGPORT`, `PGPASSWORD` (`libpq`, default libpq's), `PGCONNECT_TIMEOUT`
  (default 3): the parts of the database's URL that it leaves out. The URL may list several servers (libpq's
  multi-host URL, `postgresql://u@h1:5432,h2:5432,h3:5432/db?target_session_attrs=read-write`): every
  connection then goes to the one that takes writes (docs/high-availability.md).
- `BROKER_LEDGER_READ_DATABASE_URL` (`read_database_url`, default none: every read on `DATABASE_URL`'s
  server): the servers the read models' reads go to, PostgreSQL standbys, as a URL like `DATABASE_URL`'s
  (the PG* variables fill in the same parts), e.g.
  `postgresql://u@h1:5432,h2:5432,h3:5432/db?target_session_attrs=prefer-standby&load_balance_hosts=random`.
  A read there still sees its partner's last write, else it is served by the primary
  (`interface.http.read_your_writes`, docs/high-availability.md, "Reads from standbys"); the log and the
  decisions stay on `DATABASE_URL`'s.
- `BROKER_LEDGER_DB_CONNECTIONS` (`connections`, default 8, at least 6): the most connections one process's
  pools hold together.
- `BROKER_LEDGER_GROUP_COMMIT` (`group_commit`, default on): "off" commits each save in a transaction of
  its own, as eventsourcing does, rather than several together (`application.store.group_commit`).
- `BROKER_LEDGER_PROJECTIONS` (`run_projections`, default on): "off" runs no projection in an API process.
- `BROKER_LEDGER_PROJECTION_PAGE` (`projection_page`, default 500): events a running projection reads at once.
- `BROKER_LEDGER_PROJECTION_STALL_SECONDS` (`stall_seconds`, default 30): the age of its oldest unapplied
  event at which a projection counts as stalled (GET /health, `projections status`, `audit verify`).
- `BROKER_LEDGER_CHECKPOINT_EVENTS` (`checkpoint_events`, default 1000) and `BROKER_LEDGER_CHECKPOINT_SECONDS`
  (`checkpoint_seconds`, default 60): the worker leading the Merkle tree signs a checkpoint of it every that
  many new events, or that many seconds after the last one if the tree grew (`projections.checkpoints`).
- `BROKER_LEDGER_EXPIRY_SWEEP_SECONDS` (`expiry_sweep_seconds`, default 15): how often overdue transactions
  are lapsed.
- `BROKER_LEDGER_CALLBACK_TIMEOUT_SECONDS` (10), `..._RETRY_BASE_SECONDS` (5), `..._RETRY_CAP_SECONDS`
  (3600), `..._RETRY_WINDOW_SECONDS` (86400), `..._POLL_SECONDS` (0.5), `..._SENDERS` (4),
  `..._SIGNING_OVERLAP_SECONDS` (86400: how long a rotated-out signing secret still signs) (`delivery`): how
  callbacks are sent, see `projections.callbacks.delivery_config`.
- `PROMETHEUS_MULTIPROC_DIR` (`metrics_dir`, default none): where the workers of `serve --workers N` count,
  for GET /metrics to add up.
- `BROKER_LEDGER_SUPERVISOR_PID` (`supervisor_pid`, default none: the parent process): the `serve` process
  a worker ends with.
- `BROKER_LEDGER_CONSOLE_ORIGIN` (`console_origin`, default none: `serve`'s own address, else
  http://127.0.0.1:8000): the origin (`scheme://host[:port]`) people open the web console at, the only one
  whose pages may post its forms (`interface.console.sessions`); set it to the address behind a proxy.

`serve` sets `BROKER_LEDGER_SETTINGS` (with --settings), `BROKER_LEDGER_VAR`, `DATABASE_URL` (the embedded
server's, when unset), `BROKER_LEDGER_PROJECTIONS=off` (with --no-projections), `BROKER_LEDGER_CONSOLE_ORIGIN`
(`http://<host>:<port>` it listens on, when unset), `PROMETHEUS_MULTIPROC_DIR` and
`BROKER_LEDGER_SUPERVISOR_PID` (with several workers) for its workers; every command sets libpq's
`PGAPPNAME` (unless set) so that its connections say they are the ledger's.

A variable set to the empty string counts as unset, but for `BROKER_LEDGER_EXPIRY_SWEEP_SECONDS`, which must
then be a number. A value that cannot be used (a budget of 3, a page of "many") raises ValueError naming the
variable, when the process starts. (The eventsourcing library reads the environment too, under the settings
we hand it: `eventsourcing_env` sets every key it needs.)
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar
from urllib.parse import urlsplit

from application.credentials import DEFAULT_VAR, TOKEN_KEY_ENV, VAR_ENV
from application.settings import DEFAULT_SETTINGS, SETTINGS_ENV
from application.store.database import (
    APP_NAME,
    CONNECTIONS_ENV,
    DATABASE_URL_ENV,
    GROUP_COMMIT_ENV,
    LibpqDefaults,
    connection_budget,
)
from interface.shared.origins import origin_of
from projections.base.runner import PAGE
from projections.callbacks.delivery_config import DeliveryConfig
from projections.checkpoints import EVERY_EVENTS, EVERY_SECONDS, Checkpointer
from projections.live import PAGE_ENV
from projections.status import DEFAULT_STALL_SECONDS, STALL_SECONDS_ENV

PROJECTIONS_ENV = "BROKER_LEDGER_PROJECTIONS"  # "off": this process runs no projections
EXPIRY_SWEEP_ENV = "BROKER_LEDGER_EXPIRY_SWEEP_SECONDS"
DEFAULT_EXPIRY_SWEEP_SECONDS = "15"
MULTIPROCESS_ENV = "PROMETHEUS_MULTIPROC_DIR"  # prometheus_client's name
SUPERVISOR_ENV = "BROKER_LEDGER_SUPERVISOR_PID"  # set by `serve` before it starts its workers
CONNECTION_NAME_ENV = "PGAPPNAME"  # libpq's default application_name
CONSOLE_ORIGIN_ENV = "BROKER_LEDGER_CONSOLE_ORIGIN"
READ_DATABASE_URL_ENV = "BROKER_LEDGER_READ_DATABASE_URL"  # the read servers (standbys)
CHECKPOINT_EVENTS_ENV = "BROKER_LEDGER_CHECKPOINT_EVENTS"
CHECKPOINT_SECONDS_ENV = "BROKER_LEDGER_CHECKPOINT_SECONDS"
DEFAULT_CONSOLE_ORIGIN = "http://127.0.0.1:8000"  # `serve`'s default address
Number = TypeVar("Number", int, float)
LIBPQ_ENV = {
    "user": "PGUSER",
    "dbname": "PGDATABASE",
    "host": "PGHOST",
    "port": "PGPORT",
    "password": "PGPASSWORD",
    "connect_timeout": "PGCONNECT_TIMEOUT",
}


@dataclass(frozen=True)
class Environment:
    """What the environment says, typed: the module's docstring names each field's variable and default."""

    settings_file: Path
    var_dir: Path
    token_key: str | None = field(repr=False)  # a secret
    database_url: str = field(repr=False)  # "" when unset: the embedded server; may hold a password
    read_database_url: str = field(repr=False)  # "" when unset: every read on `database_url`'s server
    libpq: LibpqDefaults
    connections: int
    group_commit: bool
    run_projections: bool
    projection_page: int
    stall_seconds: float
    expiry_sweep_seconds: float
    delivery: DeliveryConfig
    metrics_dir: str | None
    supervisor_pid: int | None
    console_origin: str | None = None  # None: unset (`serve` sets its own address for its workers)
    checkpoint_events: int = EVERY_EVENTS
    checkpoint_seconds: float = EVERY_SECONDS

    @classmethod
    def read(cls, variables: Mapping[str, str] | None = None) -> Environment:
        """The environment of this process (`os.environ`), or `variables` (tests); ValueError naming the first
        variable whose value cannot be used."""
        found = os.environ if variables is None else variables
        return cls(
            settings_file=Path(found.get(SETTINGS_ENV) or DEFAULT_SETTINGS),
            var_dir=Path(found.get(VAR_ENV) or DEFAULT_VAR),
            token_key=found.get(TOKEN_KEY_ENV) or None,
            database_url=found.get(DATABASE_URL_ENV, "").strip(),
            read_database_url=found.get(READ_DATABASE_URL_ENV, "").strip(),
            libpq=LibpqDefaults(**{part: found.get(name) or "" for part, name in LIBPQ_ENV.items()}),
            connections=connection_budget(found.get(CONNECTIONS_ENV, "")),
            group_commit=not _is_off(found.get(GROUP_COMMIT_ENV, "")),
            run_projections=not _is_off(found.get(PROJECTIONS_ENV, "")),
            projection_page=_number(int, PAGE_ENV, found.get(PAGE_ENV) or str(PAGE)),
            stall_seconds=_stall_seconds(found.get(STALL_SECONDS_ENV, "").strip()),
            expiry_sweep_seconds=_number(
                float, EXPIRY_SWEEP_ENV, found.get(EXPIRY_SWEEP_ENV, DEFAULT_EXPIRY_SWEEP_SECONDS)
            ),
            delivery=DeliveryConfig.from_env(found),
            metrics_dir=found.get(MULTIPROCESS_ENV) or None,
            supervisor_pid=_pid(found.get(SUPERVISOR_ENV, "")),
            console_origin=_origin(found.get(CONSOLE_ORIGIN_ENV, "").strip()),
            checkpoint_events=_number(
                int, CHECKPOINT_EVENTS_ENV, found.get(CHECKPOINT_EVENTS_ENV) or str(EVERY_EVENTS)
            ),
            checkpoint_seconds=_number(
                float, CHECKPOINT_SECONDS_ENV, found.get(CHECKPOINT_SECONDS_ENV) or str(EVERY_SECONDS)
            ),
        )

    def checkpointer(self) -> Checkpointer:
        """What signs the Merkle tree's checkpoints in a projection worker, with the key kept in `var_dir`."""
        return Checkpointer(self.var_dir, self.checkpoint_events, self.checkpoint_seconds)

    @property
    def read_servers_url(self) -> str | None:
        """The read servers' URL with the parts it leaves out that the PG* variables give, as the main URL is
        completed (`LibpqDefaults.complete`); None when unset (every read goes to the main URL's server)."""
        return self.libpq.complete(self.read_database_url) if self.read_database_url else None

    @property
    def console_address(self) -> str:
        """The web console's origin: the one set, else `serve`'s default address."""
        return self.console_origin or DEFAULT_CONSOLE_ORIGIN


def _is_off(value: str) -> bool:
    return value.strip().lower() == "off"


def _number(kind: type[Number], name: str, value: str) -> Number:
    """`value` as `kind`; ValueError naming the variable `name` when it is not such a number."""
    try:
        return kind(value)
    except ValueError:
        raise ValueError(f"{name} must be a number, not {value!r}") from None


def _stall_seconds(value: str) -> float:
    return _number(float, STALL_SECONDS_ENV, value) if value else DEFAULT_STALL_SECONDS


def _origin(value: str) -> str | None:
    """An origin as browsers send it in `Origin` (scheme and host in lower case, no default port); None when
    unset; ValueError naming the variable for anything else (a path, a user, another scheme)."""
    if not value:
        return None
    parts = urlsplit(value)
    try:
        port = parts.port
    except ValueError:
        port = -1
    if parts.scheme.lower() not in ("http", "https") or not parts.hostname or port == -1:
        raise ValueError(
            f"{CONSOLE_ORIGIN_ENV} must be an origin such as https://ledger.example, not {value!r}"
        )
    if parts.path not in ("", "/") or parts.query or parts.fragment or parts.username or parts.password:
        raise ValueError(f"{CONSOLE_ORIGIN_ENV} must be an origin without a path, not {value!r}")
    return origin_of(parts.scheme, parts.hostname, port)


def _pid(value: str) -> int | None:
    with contextlib.suppress(ValueError):
        return int(value)
    return None


def hand_down(variables: Mapping[str, str]) -> None:
    """Sets `variables` in this process's environment, for the processes it starts to inherit (`serve` tells
    its workers what it decided: they read it back with `Environment.read`)."""
    os.environ.update(variables)


def name_connections() -> None:
    """libpq's default application_name, unless the environment sets one: every connection of this command
    and of the processes it starts says it is ours in pg_stat_activity."""
    os.environ.setdefault(CONNECTION_NAME_ENV, APP_NAME)
