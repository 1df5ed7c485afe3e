"""A non-editable install (`pip install .`): it carries its demo settings and knows its version.

The fast tests build the wheel (`pip wheel --no-deps`), check what it holds and run the CLI from the unpacked
wheel (with this venv's dependencies) in a folder outside the checkout. The slow one installs the project with
its dependencies into a fresh venv, as a user would (minutes: every dependency is downloaded).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "settings" / "demo.toml"
PIP_SECONDS = 600


def project_version() -> str:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]


def clean_env() -> dict[str, str]:
    """The environment without anything that points the script at this checkout."""
    dropped = ("BROKER_LEDGER_SETTINGS", "BROKER_LEDGER_VAR", "BROKER_LEDGER_TOKEN_KEY", "PYTHONPATH")
    return {key: value for key, value in os.environ.items() if key not in dropped}


def new_venv(path: Path) -> Path:
    subprocess.run([sys.executable, "-m", "venv", str(path)], check=True, timeout=120)
    return path / "bin"


def pip(bin_dir: Path, *args: str) -> None:
    done = subprocess.run(
        [str(bin_dir / "python"), "-m", "pip", "--disable-pip-version-check", *args],
        capture_output=True,
        text=True,
        timeout=PIP_SECONDS,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]


def script(
    command: list[str], cwd: Path, env: dict[str, str], *args: str
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*command, *args],
        cwd=cwd,
        env={**clean_env(), **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def check_installed(command: list[str], elsewhere: Path, env: dict[str, str] | None = None) -> None:
    """The installed script, run outside the checkout: its version, its default settings, no var/ made."""
    env = env or {}
    version = script(command, elsewhere, env, "--version")
    assert version.returncode == 0, version.stderr
    assert version.stdout.strip() == project_version()

    check = script(command, elsewhere, env, "settings", "check")
    assert check.returncode == 0, check.stderr
    first = check.stdout.splitlines()[0]
    assert first.endswith("application/demo.toml: OK"), first
    assert str(ROOT) not in first  # the wheel's own copy, not the checkout's

    token = script(command, elsewhere, env, "token", "--client", "demo-broker")
    assert token.returncode == 2 and "does not exist" in token.stderr
    assert not (elsewhere / "var").exists()


def test_the_wheel_carries_the_demo_settings_as_package_data(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        assert archive.read("application/demo.toml") == DEMO.read_bytes()
    assert not [name for name in names if name.startswith(("settings/", "var/", "tests/"))]
    assert wheel.name.startswith(f"broker_ledger-{project_version()}-")


def test_the_unpacked_wheel_finds_its_settings_and_version_outside_the_checkout(
    wheel: Path, tmp_path: Path
) -> None:
    unpacked = tmp_path / "unpacked"
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(unpacked)
    # PYTHONPATH comes before site-packages: the wheel's modules and metadata are the ones found, the
    # dependencies those of this venv
    run = [sys.executable, "-m", "interface.cli.main"]
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()

    check_installed(run, elsewhere, {"PYTHONPATH": str(unpacked)})


@pytest.mark.slow
def test_pip_install_of_the_project_into_a_fresh_venv_runs_outside_the_checkout(tmp_path: Path) -> None:
    bin_dir = new_venv(tmp_path / "venv")
    pip(bin_dir, "install", "-q", str(ROOT))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()

    check_installed([str(bin_dir / "broker-ledger")], elsewhere)
