"""The embedded PostgreSQL of `serve` (no DATABASE_URL) is owned by it: it stops when `serve` dies, however it
dies, and a `serve` that finds one left by a run that is gone stops it and starts afresh. Real processes:
`serve` in a session of its own, killed with SIGKILL.

initdb runs once per module (`first_start`: a `serve` on an empty var directory, stopped with SIGTERM); the
other tests start on a copy of the data directory it left, as a var directory of a run before would have."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import psutil
import pytest

from application.store.embedded_postgres import LOG_FILE, PID_FILE, stop_server
from tests.e2e.support import INHERITED_NOT, ROOT, SERVE_COMMAND, free_port, log_tail

START_SECONDS = 90
STOP_SECONDS = 20


class Serve:
    """`broker-ledger serve` on the embedded server with data in `var/pgdata`."""

    def __init__(self, var: Path, log: Path) -> None:
        self.var, self.log = var, log
        self.port = free_port()
        dropped = (*INHERITED_NOT, "DATABASE_URL", "BROKER_LEDGER_VAR")
        env = {key: value for key, value in os.environ.items() if key not in dropped}
        env["BROKER_LEDGER_VAR"] = str(var)
        with log.open("ab") as output:
            self.process = subprocess.Popen(
                [*SERVE_COMMAND, "--port", str(self.port)],
                cwd=ROOT,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=output,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self._wait_until_healthy()

    def _wait_until_healthy(self) -> None:
        deadline = time.monotonic() + START_SECONDS
        while time.monotonic() < deadline:
            assert self.process.poll() is None, f"serve exited early:\n{log_tail(self.log)}"
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"http://127.0.0.1:{self.port}/health/live", timeout=2).status_code < 500:
                    return
            time.sleep(0.1)
        raise AssertionError(f"serve did not answer within {START_SECONDS} s:\n{log_tail(self.log)}")

    def watchdog(self) -> psutil.Process:
        (found,) = [
            child
            for child in psutil.Process(self.process.pid).children()
            if "application.store.embedded_postgres" in " ".join(child.cmdline())
        ]
        return found

    def kill(self) -> None:
        os.kill(self.process.pid, signal.SIGKILL)
        self.process.wait(STOP_SECONDS)


def postmaster(var: Path) -> int | None:
    """The pid of the PostgreSQL running on `var/pgdata`, if one does."""
    try:
        pid = int((var / "pgdata" / "postmaster.pid").read_text().splitlines()[0])
        return pid if psutil.Process(pid).name() == "postgres" else None
    except (OSError, ValueError, IndexError, psutil.Error):
        return None


def gone_within(pid: int, seconds: float = STOP_SECONDS) -> bool:
    with contextlib.suppress(psutil.NoSuchProcess):
        psutil.Process(pid).wait(seconds)
    return not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


def fresh_root() -> Path:
    """A folder of its own directly under /tmp. Run as root, the embedded server runs as an unprivileged
    user, who must be let through every folder above its data: pgserver opens them up, but any pytest
    session starting meanwhile makes /tmp/pytest-of-root private again (0700) and removes old numbered
    folders, and initdb then exits 1."""
    return Path(tempfile.mkdtemp(prefix="bl-embedded-pg-", dir="/tmp"))


@dataclass(frozen=True)
class FirstStart:
    """A `serve` on a var directory without pgdata (so initdb ran), stopped with SIGTERM."""

    var: Path
    exit_code: int
    said: str  # what serve wrote to its terminal


@pytest.fixture(scope="module")
def first_start() -> Iterator[FirstStart]:
    root = fresh_root()
    var = root / "var"
    try:
        serve = Serve(var, root / "serve.log")
        serve.process.send_signal(signal.SIGTERM)
        code = serve.process.wait(STOP_SECONDS)
        yield FirstStart(var, code, (root / "serve.log").read_text())
    finally:
        stop_server(var / "pgdata")
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def var(first_start: FirstStart) -> Iterator[Path]:
    """A var directory whose pgdata is a copy of the one `first_start` left (owner and modes kept: `cp -a`),
    removed after."""
    root = fresh_root()
    var = root / "var"
    var.mkdir()
    subprocess.run(["cp", "-a", str(first_start.var / "pgdata"), str(var / "pgdata")], check=True)
    try:
        yield var
    finally:
        stop_server(var / "pgdata")  # whatever a failed test left running
        shutil.rmtree(root, ignore_errors=True)


def test_the_embedded_server_stops_when_serve_is_killed_with_sigkill(var: Path, tmp_path: Path) -> None:
    serve = Serve(var, tmp_path / "serve.log")
    server = postmaster(var)
    assert server is not None
    owner = json.loads((var / PID_FILE).read_text())
    assert (owner["owner"], owner["postmaster"]) == (serve.process.pid, server)

    serve.kill()

    assert gone_within(server), f"PostgreSQL {server} still runs after serve was killed"
    deadline = time.monotonic() + 5  # the watchdog removes the owner record once the server has stopped
    while (var / PID_FILE).exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not (var / PID_FILE).exists()
    assert "is gone; stopping PostgreSQL" in (var / LOG_FILE).read_text()


def test_a_server_left_by_a_run_that_is_gone_is_stopped_by_the_next_start(var: Path, tmp_path: Path) -> None:
    log = tmp_path / "serve.log"
    first = Serve(var, log)
    orphan = postmaster(var)
    assert orphan is not None
    first.watchdog().kill()  # as if the watchdog had died too: the server outlives its owner
    first.kill()
    assert postmaster(var) == orphan

    second = Serve(var, log)

    assert gone_within(orphan)
    fresh = postmaster(var)
    assert fresh not in (None, orphan)
    assert "stopping an orphaned embedded PostgreSQL" in log.read_text()
    second.process.send_signal(signal.SIGTERM)
    assert second.process.wait(STOP_SECONDS) == 0
    assert gone_within(fresh)
    assert not (var / PID_FILE).exists()


def test_the_terminal_sees_no_initdb_or_pg_ctl_output(first_start: FirstStart) -> None:
    assert first_start.exit_code == 0, first_start.said
    assert "initdb" not in first_start.said and "pg_ctl" not in first_start.said, first_start.said
    assert "initdb" in (first_start.var / LOG_FILE).read_text()
