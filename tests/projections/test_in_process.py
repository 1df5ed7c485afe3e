"""Where the projections run: in every API worker by default, or not at all with `serve --no-projections`
(then in `broker-ledger projections run` processes)."""

from __future__ import annotations

import functools
import os

import pytest
from argon2 import PasswordHasher

from application.credentials import VAR_ENV
from interface.app import PROJECTIONS_ENV, projection_workers
from interface.cli.main import main
from interface.environment import Environment
from projections.catalog import PROJECTIONS


@pytest.fixture(autouse=True)
def no_projections_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(PROJECTIONS_ENV, raising=False)


def test_an_api_worker_offers_to_run_every_projection_by_default() -> None:
    [worker] = projection_workers(Environment.read(), "postgresql://db/ledger")
    assert [spec.name for spec in worker.specs] == [spec.name for spec in PROJECTIONS]
    assert "ReadModels" in {spec.name for spec in worker.specs}


def test_an_api_worker_runs_no_projection_when_they_are_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(PROJECTIONS_ENV, "off")
    assert projection_workers(Environment.read(), "postgresql://db/ledger") == []


def test_serve_with_no_projections_turns_them_off_for_its_workers(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv(VAR_ENV, str(tmp_path / "var"))
    monkeypatch.setenv("DATABASE_URL", "postgresql://nobody@127.0.0.1:1/none")
    monkeypatch.setattr(
        "application.credentials.PasswordHasher",
        functools.partial(PasswordHasher, time_cost=1, memory_cost=8, parallelism=1),
    )
    monkeypatch.setattr("interface.cli.serve.QuietServer.run", lambda self: None)
    monkeypatch.setenv(PROJECTIONS_ENV, "on")  # so that the "off" serve writes is undone after the test
    with pytest.raises(SystemExit) as exit_:
        main(["serve", "--no-projections"])
    assert exit_.value.code == 0
    assert os.environ[PROJECTIONS_ENV] == "off"
