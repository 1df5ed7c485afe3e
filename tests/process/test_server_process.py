"""The server process itself: how it is started, what it writes to its var directory, /health.

Stopping it (SIGTERM, exit code 0 within 15 s) is checked when the package's server fixture ends; the signals
sent to servers of their own are in `tests/servers/test_server_signals.py`.
"""

from __future__ import annotations

import stat
import subprocess
import sys
from pathlib import Path

import httpx

from tests.e2e.support import CLIENTS, ROOT
from tests.processes import SERVE_COMMAND


def test_health_answers_without_a_token_and_names_the_primary_it_writes_to(base_url: str) -> None:
    response = httpx.get(f"{base_url}/health", timeout=10)

    assert response.status_code == 200
    body = response.json()
    assert body["status"] == "ok"
    assert body["database"]["primary"] is True
    assert body["database"]["server"].rpartition(":")[2].isdigit(), body


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
        [sys.executable, "-m", "interface.cli.main", "serve", "--help"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )

    assert done.returncode == 0, done.stderr
    assert "--port" in done.stdout
