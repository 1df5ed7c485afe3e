"""The one way the tests start the service's processes: `broker-ledger serve` (`ApiServer`, and
`running_server` for a block) and `broker-ledger projections run` (`ProjectionsRun`).

Each is the console script's entry point (`interface.cli.main:main`) run by the tests' own interpreter, in a
session of its own (so that a test can SIGKILL the whole process group: uvicorn's supervisor and its workers,
or a runner supervisor and its runners), with the environment of the tests less the demo settings' and
keys' variables (INHERITED_NOT), and its output appended to a log file that every failure quotes.
A process is started, killed and started again as one object, so a restarted server keeps its port, var
directory and database, and clients keep their base URL.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.connection_hints import hint_for
from tests.e2e.support import Api, api_client, client_secrets, obtain_token

ROOT = Path(__file__).resolve().parents[1]
# `python -m interface.cli.main serve` answers 'Unknown command "serve"' (see test_server_process.py): run as
# __main__, the module's `app` is not the one `interface.cli.serve` registers the command on. The console
# script's entry point is started instead, with the same interpreter.
CLI_COMMAND = [sys.executable, "-c", "from interface.cli.main import main; main()"]
SERVE_COMMAND = [*CLI_COMMAND, "serve"]
PROJECTIONS_COMMAND = [*CLI_COMMAND, "projections", "run"]
INHERITED_NOT = ("BROKER_LEDGER_SETTINGS", "BROKER_LEDGER_TOKEN_KEY")  # the demo settings, keys from var/
START_SECONDS = 60
STOP_SECONDS = 15
POLL_SECONDS = 0.05


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def listening(port: int) -> bool:
    with socket.socket() as probe:
        probe.settimeout(0.5)
        return probe.connect_ex(("127.0.0.1", port)) == 0


def log_tail(log: Path, lines: int = 60) -> str:
    try:
        return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
    except FileNotFoundError:
        return "<no log>"


class ServiceProcess:
    """A command of the console script in a session of its own, its output appended to `log`."""

    stop_seconds: float = STOP_SECONDS  # from SIGTERM to its exit, at most

    def __init__(
        self, command: list[str], var: Path, log: Path, database_url: str | None, env: dict[str, str] | None
    ) -> None:
        self.command = command
        words = command[len(CLI_COMMAND) :]
        self.name = " ".join(itertools.takewhile(lambda word: not word.startswith("-"), words))  # "serve"
        self.log = log
        self.database_url = database_url  # None: the embedded server of `var` (DATABASE_URL unset)
        dropped = INHERITED_NOT if database_url is not None else (*INHERITED_NOT, "DATABASE_URL")
        self.env = {key: value for key, value in os.environ.items() if key not in dropped}
        self.env.update(BROKER_LEDGER_VAR=str(var), PYTHONUNBUFFERED="1", **(env or {}))
        if database_url is not None:
            self.env["DATABASE_URL"] = database_url
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> float:
        """Starts the process; returns the seconds that took (those until it is ready, where it says when)."""
        began = time.monotonic()
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with self.log.open("ab") as output:
            self.process = subprocess.Popen(
                self.command,
                cwd=ROOT,
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=output,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        return time.monotonic() - began

    @property
    def pid(self) -> int | None:
        """The pid of the process while it runs, else None."""
        process = self.process
        return process.pid if process is not None and process.poll() is None else None

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def kill(self) -> None:
        """SIGKILL to the whole process group (no shutdown of any kind), whatever of it is left even when
        its leader has ended, and waits for the leader."""
        process = self.process
        if process is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=10)

    def kill_leader(self) -> None:
        """SIGKILL to the started process only: its children (workers, runners) are left to notice."""
        assert self.process is not None, "never started"
        self.process.kill()
        self.process.wait(timeout=10)

    def stop(self, seconds: float | None = None) -> int | None:
        """SIGTERM, as an orchestrator stops it, and wait: the exit code; None if it had to be killed after
        `seconds` (its `stop_seconds` by default), or if it was never started."""
        process = self.process
        if process is None or process.poll() is not None:
            return None if process is None else process.returncode
        process.send_signal(signal.SIGTERM)
        try:
            return process.wait(timeout=self.stop_seconds if seconds is None else seconds)
        except subprocess.TimeoutExpired:
            self.kill()
            return None

    def stop_cleanly(self) -> None:
        """SIGTERM, and it must exit with 0 within its `stop_seconds`."""
        code = self.stop()
        assert code == 0, f"{self.name} exited with {code} on SIGTERM (None: killed)\n{self.tail()}"

    def tail(self, lines: int = 60) -> str:
        return log_tail(self.log, lines)


class ApiServer(ServiceProcess):
    """`broker-ledger serve --workers N` on a port of its own (kept when started again); `start` waits until
    GET `ready` answers 200."""

    def __init__(
        self,
        database_url: str | None,
        var: Path,
        log: Path,
        *,
        workers: int | None = 2,
        settings: Path | None = None,
        options: tuple[str, ...] = (),
        ready: str = "/health",
        start_seconds: float = START_SECONDS,
        env: dict[str, str] | None = None,
    ) -> None:
        self.port = free_port()
        self.var = var
        self.ready, self.start_seconds = ready, start_seconds
        command = [*SERVE_COMMAND, "--port", str(self.port)]
        command += ["--workers", str(workers)] if workers is not None else []
        command += ["--settings", str(settings)] if settings is not None else []
        super().__init__([*command, *options], var, log, database_url, env)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> float:
        """Starts the server and waits until it is ready; returns the seconds that took."""
        began = time.monotonic()
        super().start()
        self.wait_until_healthy(self.start_seconds)
        return time.monotonic() - began

    def wait_until_healthy(self, seconds: float) -> None:
        assert self.process is not None, "the server was never started"
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                self._fail(f"the server exited with {self.process.returncode} while starting")
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(f"{self.base_url}{self.ready}", timeout=2).status_code == 200:
                    return
            time.sleep(POLL_SECONDS)
        self._fail(f"GET {self.ready} did not answer 200 within {seconds} s")

    def _fail(self, problem: str) -> None:
        """Fails the test with the log's tail, and the suite's connection budget when none was left."""
        tail = self.tail()
        hint = hint_for(tail, self.database_url) if self.database_url else ""
        pytest.fail(f"{problem}\n{tail}{hint}", pytrace=False)

    def kill(self) -> None:
        """SIGKILL to the process group (supervisor and workers); returns once the port is closed."""
        super().kill()
        deadline = time.monotonic() + 10
        while listening(self.port) and time.monotonic() < deadline:
            time.sleep(POLL_SECONDS)
        assert not listening(self.port), f"port {self.port} still open after SIGKILL of the process group"

    def client(self, client_id: str) -> Api:
        """A client of `client_id` with a token from this server (its secret from the var directory)."""
        return api_client(self.base_url, self.token(client_id))

    def token(self, client_id: str) -> str:
        return obtain_token(self.base_url, client_id, client_secrets(self.var)[client_id])


@contextlib.contextmanager
def running_server(database_url: str, var: Path, log: Path, **options: Any) -> Iterator[ApiServer]:
    """An `ApiServer` (`options` as its own) started for the block; at its end it gets SIGTERM and must exit
    with 0 within STOP_SECONDS (it is killed, whatever it is doing, when the block fails)."""
    server = ApiServer(database_url, var, log, **options)
    try:
        server.start()
        yield server
    except BaseException:
        server.kill()
        raise
    server.stop_cleanly()


class ProjectionsRun(ServiceProcess):
    """`broker-ledger projections run`, with `--processes N` when given: N runners under a supervisor, each
    found (its pid, what it leads) by the lines it logs."""

    stop_seconds = 30.0  # each runner lets its projections go

    def __init__(
        self,
        database_url: str,
        var: Path,
        log: Path,
        *,
        processes: int | None = None,
        env: dict[str, str] | None = None,
    ) -> None:
        self.processes = processes
        command = [*PROJECTIONS_COMMAND, *(["--processes", str(processes)] if processes else [])]
        super().__init__(command, var, log, database_url, env)

    def stop(self, seconds: float | None = None) -> int | None:
        if self.pid is not None:
            os.kill(self.pid, signal.SIGCONT)  # should a test hold it (`supervisor_held`)
        return super().stop(seconds)

    def lines(self, pattern: str) -> list[re.Match[str]]:
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        return list(re.finditer(pattern, text))

    def wait_for(self, pattern: str, count: int = 1, seconds: float = 30) -> list[re.Match[str]]:
        """The lines of the log matching `pattern`, once there are `count` of them."""
        deadline = time.monotonic() + seconds
        while len(found := self.lines(pattern)) < count:
            if time.monotonic() > deadline:
                pytest.fail(f"{count} x {pattern!r} not logged within {seconds} s\n{self.tail()}")
            time.sleep(POLL_SECONDS)
        return found

    def runner_pid(self, index: int) -> int:
        """The pid of runner `index` as last started."""
        started = self.wait_for(rf"runner {index} of {self.processes} started \(pid (\d+)\)")
        return int(started[-1].group(1))

    def kill_runner(self, index: int) -> None:
        os.kill(self.runner_pid(index), signal.SIGKILL)

    @contextlib.contextmanager
    def supervisor_held(self) -> Iterator[None]:
        """The supervisor stopped (SIGSTOP) while inside: it starts no runner again until it goes on."""
        assert self.process is not None
        os.kill(self.process.pid, signal.SIGSTOP)
        try:
            yield
        finally:
            os.kill(self.process.pid, signal.SIGCONT)
