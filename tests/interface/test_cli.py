"""The `broker-ledger` console script: `settings check`, `token` and `--version`."""

from __future__ import annotations

import base64
import functools
import os
import subprocess
import sys
from pathlib import Path

import pytest
from argon2 import PasswordHasher

from application.credentials import TOKEN_KEY_ENV, VAR_ENV, Credentials, load_or_create_credentials
from application.ports import SystemClock
from application.settings import DEFAULT_SETTINGS, SETTINGS_ENV
from interface.cli.main import main
from interface.http.auth import TokenService
from interface.http.settings import load_service_settings

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


@pytest.fixture
def server_credentials(environment: Path) -> Credentials:
    """What `serve` keeps in its var directory after its first start: the signing key among them."""
    return load_or_create_credentials(load_service_settings(DEFAULT_SETTINGS), environment)


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
    assert "clients:         5" in out


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


def test_settings_check_reports_the_apis_problems_with_the_ledgers(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    broken = tmp_path / "broken.toml"
    broken.write_text(
        DEFAULT_SETTINGS.read_text()
        .replace('base_currency = "EUR"', 'base_currency = "CHF"')
        .replace("[rate_limits]", "[rate_limit]")
    )

    assert run("settings", "check", "--file", str(broken)) == 2

    assert capsys.readouterr().err.splitlines() == [
        f"{broken}: Object contains unknown field `rate_limit` - at `$`",
        f"{broken}: base_currency 'CHF' is not in [currencies]",
    ]


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
    environment: Path, server_credentials: Credentials, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run("token", "--client", "demo-broker") == 0

    captured = capsys.readouterr()
    token = captured.out
    assert token.count("\n") == 1
    assert f"signed with the key in {environment.absolute() / 'credentials.json'}" in captured.err
    settings = load_service_settings(DEFAULT_SETTINGS).api
    credentials = server_credentials
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


def test_token_refuses_to_mint_where_no_server_keeps_its_key_and_creates_nothing(
    environment: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run("token", "--client", "demo-broker") == 2

    captured = capsys.readouterr()
    assert captured.out == ""
    assert f"{environment.absolute() / 'credentials.json'} does not exist" in captured.err
    assert "BROKER_LEDGER_VAR" in captured.err
    assert not environment.exists()


def test_token_run_outside_the_project_folder_creates_no_var_directory(tmp_path: Path) -> None:
    env = {key: value for key, value in os.environ.items() if key not in (VAR_ENV, TOKEN_KEY_ENV)}

    done = subprocess.run(
        [sys.executable, "-m", "interface.cli.main", "token", "--client", "demo-broker"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )

    assert done.returncode == 2, done.stderr
    assert done.stdout == ""
    assert "does not exist" in done.stderr
    assert list(tmp_path.iterdir()) == []


def test_token_signs_with_the_key_from_the_environment_without_a_var_directory(
    environment: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    key = os.urandom(32)
    monkeypatch.setenv(TOKEN_KEY_ENV, base64.b64encode(key).decode())

    assert run("token", "--client", "demo-auditor") == 0

    captured = capsys.readouterr()
    assert f"signed with the key in {TOKEN_KEY_ENV}" in captured.err
    settings = load_service_settings(DEFAULT_SETTINGS).api
    assert TokenService(settings.tokens, key, SystemClock()).verify(captured.out.strip()).client_id == (
        "demo-auditor"
    )
    assert not environment.exists()


def test_version_is_the_installed_distributions(capsys: pytest.CaptureFixture[str]) -> None:
    from importlib.metadata import version

    assert run("--version") == 0

    assert capsys.readouterr().out.strip() == version("broker-ledger") != "0.0.0"


@pytest.mark.usefixtures("server_credentials")
def test_token_refuses_a_scope_the_client_does_not_hold(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert run("token", "--client", "demo-broker", "--scope", "operator") == 2

    assert "operator" in capsys.readouterr().err


@pytest.mark.usefixtures("server_credentials")
def test_token_reads_the_settings_given_as_option(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    custom = tmp_path / "custom.toml"
    custom.write_text(
        DEFAULT_SETTINGS.read_text() + '\n[partners.extra]\nclients.extra-auditor = { roles = ["auditor"] }\n'
    )

    assert run("token", "--client", "extra-auditor", "--settings", str(custom)) == 0
    assert run("token", "--client", "extra-auditor") == 2


@pytest.mark.usefixtures("server_credentials")
def test_the_module_runs_as_a_script(environment: Path) -> None:
    env = {**os.environ, VAR_ENV: str(environment)}

    result = subprocess.run(
        [sys.executable, "-m", "interface.cli.main", "token", "--client", "demo-auditor"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )

    assert result.returncode == 0, result.stderr
    assert result.stdout.count(".") == 2
