"""The `broker-ledger` console script: `settings check` and `token`."""

from __future__ import annotations

import functools
import os
import subprocess
import sys
from pathlib import Path

import pytest
from argon2 import PasswordHasher

from application.credentials import TOKEN_KEY_ENV, VAR_ENV, load_or_create_credentials
from application.ports import SystemClock
from application.settings import DEFAULT_SETTINGS, SETTINGS_ENV, load_settings
from interface.auth import TokenService
from interface.cli import main

ROOT = Path(__file__).resolve().parents[2]

BROKEN_SETTINGS = """
base_currency = "CHF"
[currencies.EUR]
minor_units = 12
[cryptos]
[trust_levels]
[payment_methods]
[partners]
"""


@pytest.fixture(autouse=True)
def environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    var = tmp_path / "var"
    monkeypatch.setenv(VAR_ENV, str(var))
    monkeypatch.delenv(SETTINGS_ENV, raising=False)
    monkeypatch.delenv(TOKEN_KEY_ENV, raising=False)
    monkeypatch.setattr(
        "application.credentials.PasswordHasher",
        functools.partial(PasswordHasher, time_cost=1, memory_cost=8, parallelism=1),
    )
    return var


def run(*argv: str) -> int:
    with pytest.raises(SystemExit) as exit_:
        main(list(argv))
    return exit_.value.code


def test_settings_check_summarises_the_demo_settings(capsys: pytest.CaptureFixture[str]) -> None:
    assert run("settings", "check") == 0

    out = capsys.readouterr().out
    assert f"{DEFAULT_SETTINGS}: OK" in out
    assert "cryptos:         BTC, ETH, LTC" in out
    assert "trust levels:    Basic, Plus" in out
    assert "partners:        2 (demo, other)" in out
    assert "clients:         4" in out


def test_settings_check_prints_each_problem_on_its_own_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    broken = tmp_path / "broken.toml"
    broken.write_text(BROKEN_SETTINGS)

    assert run("settings", "check", "--file", str(broken)) == 2

    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    assert lines == [
        f"{broken}: base_currency 'CHF' is not in [currencies]",
        f"{broken}: currencies.EUR.minor_units must be between 0 and 8",
    ]
    assert captured.out == ""


def test_settings_check_reports_a_missing_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run("settings", "check", "--file", str(tmp_path / "absent.toml")) == 2

    assert "cannot read the settings file" in capsys.readouterr().err


def test_settings_check_follows_the_settings_environment_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    broken = tmp_path / "broken.toml"
    broken.write_text(BROKEN_SETTINGS)
    monkeypatch.setenv(SETTINGS_ENV, str(broken))

    assert run("settings", "check") == 2
    assert str(broken) in capsys.readouterr().err


def test_token_prints_only_a_token_that_the_server_accepts(
    environment: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run("token", "--client", "demo-broker") == 0

    token = capsys.readouterr().out
    assert token.count("\n") == 1
    settings = load_settings(DEFAULT_SETTINGS)
    credentials = load_or_create_credentials(settings, environment)
    principal = TokenService(settings.tokens, credentials.signing_key, SystemClock()).verify(token.strip())
    assert (principal.client_id, principal.partner, principal.roles) == (
        "demo-broker",
        "demo",
        frozenset({"broker"}),
    )


def test_token_refuses_an_unknown_client(capsys: pytest.CaptureFixture[str]) -> None:
    assert run("token", "--client", "nobody") == 2

    captured = capsys.readouterr()
    assert "unknown client 'nobody'" in captured.err
    assert "demo-broker" in captured.err
    assert captured.out == ""


def test_token_refuses_a_scope_the_client_does_not_hold(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert run("token", "--client", "demo-broker", "--scope", "operator") == 2

    assert "operator" in capsys.readouterr().err


def test_token_reads_the_settings_given_as_option(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    custom = tmp_path / "custom.toml"
    custom.write_text(
        DEFAULT_SETTINGS.read_text() + '\n[partners.extra]\nclients.extra-auditor = { roles = ["auditor"] }\n'
    )

    assert run("token", "--client", "extra-auditor", "--settings", str(custom)) == 0
    assert run("token", "--client", "extra-auditor") == 2


def test_the_module_runs_as_a_script(environment: Path) -> None:
    env = {**os.environ, VAR_ENV: str(environment)}

    result = subprocess.run(
        [sys.executable, "-m", "interface.cli", "token", "--client", "demo-auditor"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )

    assert result.returncode == 0, result.stderr
    assert result.stdout.count(".") == 2
    assert (environment / "client-secrets.txt").exists()
