"""The server process itself: how it is started, what it writes to its var directory, /health.

Stopping it (SIGTERM, exit code 0 within 15 s) is checked when the session's server fixture ends; a SIGKILL of
a multi-worker server's supervisor takes its workers with it.
"""

from __future__ import annotations

import stat
import subprocess
import sys
from pathlib import Path

import httpx
import psutil

from tests.e2e.support import CLIENTS, ROOT, SERVE_COMMAND, log_tail, running_server
from tests.resilience.processes import ApiServer, listening

NO_PROJECTIONS = ("--no-projections",)
WORKERS_GONE_SECONDS = 15  # a worker's graceful shutdown (at most 10 s) and its exit


def test_health_answers_without_a_token(base_url: str) -> None:
    response = httpx.get(f"{base_url}/health", timeout=10)

    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


def test_the_var_directory_keeps_the_generated_secrets_private(base_url: str, server_var: Path) -> None:
    assert stat.S_IMODE(server_var.stat().st_mode) == 0o700
    for name in ("credentials.json", "client-secrets.txt"):
        assert stat.S_IMODE((server_var / name).stat().st_mode) == 0o600
    stored = (server_var / "credentials.json").read_text()
    secrets_file = (server_var / "client-secrets.txt").read_text()
    assert "hmac-sha256$" in stored and "$argon2" not in stored
    for line in secrets_file.splitlines():
        assert line.partition("=")[2] not in stored  # only hashes are kept next to the signing key
    assert {line.partition("=")[0] for line in secrets_file.splitlines()} == set(CLIENTS)


def test_the_console_script_entry_point_knows_serve() -> None:
    done = subprocess.run(
        [*SERVE_COMMAND, "--help"], cwd=ROOT, capture_output=True, text=True, timeout=60, check=False
    )

    assert done.returncode == 0, done.stderr
    assert "--port" in done.stdout and "--workers" in done.stdout


def test_python_dash_m_interface_cli_knows_serve() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "interface.cli", "serve", "--help"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )

    assert done.returncode == 0, done.stderr
    assert "--port" in done.stdout


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
