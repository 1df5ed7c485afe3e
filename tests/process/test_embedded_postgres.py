"""The embedded PostgreSQL of `serve` (no DATABASE_URL) is owned by it: it stops when `serve` dies, however it
dies, and a `serve` that finds one left by a run that is gone stops it and starts afresh. Real processes:
`serve` in a session of its own, killed with SIGKILL.

initdb runs once per module (`first_start`: a `serve` on an empty var directory, stopped with SIGTERM); the
other tests start on a copy of the data directory it left, as a var directory of a run before would have."""

from __future__ import annotations

import contextlib
import json
import shutil
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
from tests.e2e.support import client_secrets
from tests.processes import ApiServer

START_SECONDS = 90  # initdb included
STOP_SECONDS = 20


def serve(var: Path, log: Path) -> ApiServer:
    """`broker-ledger serve` started on the embedded server with data in `var/pgdata` (no DATABASE_URL),
    once it answers."""
    server = ApiServer(None, var, log, workers=None, ready="/health/live", start_seconds=START_SECONDS)
    server.start()
    return server


def watchdog(server: ApiServer) -> psutil.Process:
    """The process that stops the embedded PostgreSQL once `serve` is gone."""
    (found,) = [
        child
        for child in psutil.Process(server.pid).children()
        if "application.store.embedded_postgres" in " ".join(child.cmdline())
    ]
    return found


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
    """A `serve` on a var directory without pgdata (so initdb ran), its console read, stopped with SIGTERM."""

    var: Path
    exit_code: int
    said: str  # what serve wrote to its terminal
    console: dict[str, int]  # the status of each console page an auditor signed in to it was answered


def console_pages(server: ApiServer) -> dict[str, int]:
    """Signs in to the console as the demo auditor and reads each page: the status of each, by path."""
    secret = client_secrets(server.var)["demo-auditor"]
    form = {"client_id": "demo-auditor", "client_secret": secret}
    with httpx.Client(base_url=server.base_url, timeout=10, follow_redirects=True) as browser:
        # from the console's own page: `serve` takes the origin it listens on as the console's
        landed = browser.post("/console/sign-in", data=form, headers={"Origin": server.base_url})
        statuses = {"sign-in": landed.status_code if landed.url.path == "/console/transactions" else 0}
        for page in ("/console/transactions", "/console/reserves", "/console/volumes", "/console/system"):
            answer = browser.get(page)
            statuses[page] = answer.status_code if 'id="signed-in-as"' in answer.text else 0
    return statuses


@pytest.fixture(scope="module")
def first_start() -> Iterator[FirstStart]:
    root = fresh_root()
    var = root / "var"
    try:
        server = serve(var, root / "serve.log")
        pages = console_pages(server)
        code = server.stop(STOP_SECONDS)
        yield FirstStart(var, code, (root / "serve.log").read_text(), pages)
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
    started = serve(var, tmp_path / "serve.log")
    server = postmaster(var)
    assert server is not None
    owner = json.loads((var / PID_FILE).read_text())
    assert (owner["owner"], owner["postmaster"]) == (started.pid, server)

    started.kill_leader()

    assert gone_within(server), f"PostgreSQL {server} still runs after serve was killed"
    deadline = time.monotonic() + 5  # the watchdog removes the owner record once the server has stopped
    while (var / PID_FILE).exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not (var / PID_FILE).exists()
    assert "is gone; stopping PostgreSQL" in (var / LOG_FILE).read_text()


def test_a_server_left_by_a_run_that_is_gone_is_stopped_by_the_next_start(var: Path, tmp_path: Path) -> None:
    log = tmp_path / "serve.log"
    first = serve(var, log)
    orphan = postmaster(var)
    assert orphan is not None
    watchdog(first).kill()  # as if the watchdog had died too: the server outlives its owner
    first.kill_leader()
    assert postmaster(var) == orphan

    second = serve(var, log)

    assert gone_within(orphan)
    fresh = postmaster(var)
    assert fresh not in (None, orphan)
    assert "stopping an orphaned embedded PostgreSQL" in log.read_text()
    assert second.stop(STOP_SECONDS) == 0
    assert gone_within(fresh)
    assert not (var / PID_FILE).exists()


def test_the_terminal_sees_no_initdb_or_pg_ctl_output(first_start: FirstStart) -> None:
    assert first_start.exit_code == 0, first_start.said
    assert "initdb" not in first_start.said and "pg_ctl" not in first_start.said, first_start.said
    assert "initdb" in (first_start.var / LOG_FILE).read_text()


def test_the_console_serves_every_page_on_the_embedded_default(first_start: FirstStart) -> None:
    assert first_start.console == dict.fromkeys(first_start.console, 200), first_start.console
    assert len(first_start.console) == 5
