"""Signals to server processes of their own, on the session's database: a one-worker server exits with 0 on
SIGTERM, and a SIGKILL of a multi-worker server's supervisor takes its workers with it.
"""

from __future__ import annotations

from pathlib import Path

import httpx
import psutil

from tests.e2e.support import log_tail, running_server
from tests.resilience.processes import ApiServer, listening

NO_PROJECTIONS = ("--no-projections",)
WORKERS_GONE_SECONDS = 15  # a worker's graceful shutdown (at most 10 s) and its exit


def test_a_single_worker_server_exits_with_0_on_sigterm(database_url: str, tmp_path: Path) -> None:
    with running_server(database_url, tmp_path / "var", tmp_path / "server.log", workers=1) as url:
        assert httpx.get(f"{url}/health", timeout=10).status_code == 200


def test_the_workers_of_a_multi_worker_server_end_when_its_supervisor_is_killed(
    database_url: str, tmp_path: Path
) -> None:
    server = ApiServer(
        database_url, tmp_path / "var", tmp_path / "server.log", workers=2, options=NO_PROJECTIONS
    )
    server.start()
    assert server.process is not None
    supervisor = psutil.Process(server.process.pid)
    workers = supervisor.children()
    try:
        assert len(workers) >= 2, log_tail(server.log)
        supervisor.kill()  # SIGKILL to the supervisor only: nobody forwards anything to the workers
        server.process.wait(timeout=10)
        _, alive = psutil.wait_procs(workers, timeout=WORKERS_GONE_SECONDS)
        alive = [worker for worker in alive if worker.status() != psutil.STATUS_ZOMBIE]
        assert not alive, (
            f"workers {[w.pid for w in alive]} outlived their supervisor\n{log_tail(server.log)}"
        )
        assert not listening(server.port), f"port {server.port} is still served by an orphan"
    finally:
        server.kill()  # the process group, should anything of it be left
