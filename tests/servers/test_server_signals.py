"""Signals to server processes of their own, on the session's database: a one-worker server exits with 0 on
SIGTERM, and a SIGKILL of a multi-worker server's supervisor takes its workers with it.
"""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import psutil

from tests.processes import ApiServer, listening, running_server

NO_PROJECTIONS = ("--no-projections",)
WORKERS_GONE_SECONDS = 15  # a worker's graceful shutdown (at most 10 s) and its exit


def test_a_single_worker_server_exits_with_0_on_sigterm(database_url: str, tmp_path: Path) -> None:
    with running_server(database_url, tmp_path / "var", tmp_path / "server.log", workers=1) as server:
        assert httpx.get(f"{server.base_url}/health", timeout=10).status_code == 200


def test_the_workers_of_a_multi_worker_server_end_when_its_supervisor_is_killed(
    database_url: str, tmp_path: Path
) -> None:
    server = ApiServer(
        database_url, tmp_path / "var", tmp_path / "server.log", workers=2, options=NO_PROJECTIONS
    )
    server.start()
    workers = psutil.Process(server.pid).children()
    try:
        assert len(workers) >= 2, server.tail()
        server.kill_leader()  # SIGKILL to the supervisor only: nobody forwards anything to the workers
        alive = still_running(workers, WORKERS_GONE_SECONDS)
        assert not alive, f"workers {[w.pid for w in alive]} outlived their supervisor\n{server.tail()}"
        assert not listening(server.port), f"port {server.port} is still served by an orphan"
    finally:
        server.kill()  # the process group, should anything of it be left


def still_running(processes: list[psutil.Process], seconds: float) -> list[psutil.Process]:
    """Those of `processes` still running (neither gone nor a zombie) after up to `seconds`: looked at every
    50 ms, so that the test goes on as soon as all have ended."""
    deadline = time.monotonic() + seconds
    while (alive := [process for process in processes if running(process)]) and time.monotonic() < deadline:
        time.sleep(0.05)
    return alive


def running(process: psutil.Process) -> bool:
    try:
        return process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
