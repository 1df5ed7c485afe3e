"""A projection that cannot apply an event stops there, visibly: the failure is recorded (message, event,
when, how many in a row) and cleared once it applies events again; `projections status` shows it and exits 1;
`audit verify` fails on it; a lag is judged by the age of the oldest unapplied event, so an idle log is never
behind. The event here is a `Transaction.Committed` without its fields, which ReadModels cannot apply."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg
import pytest

from application.credentials import VAR_ENV
from application.store.database import DATABASE_URL_ENV
from projections import status
from projections.base.runner import handles
from projections.catalog import PROJECTIONS, READ_MODELS
from projections.live import MAX_RETRY_SECONDS, ProjectionWorker
from projections.read_models import ReadModelsProjection
from tests.projections.audit_support import Flows, catch_up, new_ledger, own_database, query
from tests.projections.stall_support import eventually, failures, head_of, insert_unappliable_event, log_app
from tests.projections.support import run_cli as run

NAMES = [spec.name for spec in PROJECTIONS]


def position(url: str, name: str = "ReadModels") -> int:
    with psycopg.connect(url, autocommit=True) as conn:
        return status.positions(conn, [name])[name]


@dataclass
class Stall:
    url: str
    bad: int  # the notification id of the event ReadModels cannot apply
    head: int


@pytest.fixture
def stalled(database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Stall]:
    """A customer's life, every projection caught up, the unappliable event, another life after it; the
    ReadModels worker running (retrying every 0.1 s, doubling) until it has recorded its failure."""
    with own_database(database_url) as url:
        ledger = new_ledger(url)
        try:
            Flows(ledger, prefix="a").lives(1)
            catch_up(url)
            bad = insert_unappliable_event(url)
            Flows(ledger, prefix="b").lives(1)
        finally:
            ledger.close()
        monkeypatch.setenv(DATABASE_URL_ENV, url)
        monkeypatch.setenv(VAR_ENV, str(tmp_path / "var"))
        worker = ProjectionWorker(url, [READ_MODELS], retry_seconds=0.1)
        worker.start()
        try:
            eventually(lambda: "ReadModels" in failures(url))
            yield Stall(url, bad, head_of(url))
        finally:
            worker.stop()


def test_a_projection_stops_at_the_event_it_cannot_apply_and_records_why(stalled):
    failure = failures(stalled.url)["ReadModels"]
    assert failure.notification_id == stalled.bad
    assert "AttributeError" in failure.error and "Transaction.Committed" in failure.error
    assert failure.failures >= 1 and failure.since <= failure.failed_at
    assert position(stalled.url) == stalled.bad - 1  # every event before it applied, none after
    eventually(lambda: failures(stalled.url)["ReadModels"].failures >= 3)
    assert position(stalled.url) == stalled.bad - 1  # retried, never skipped
    assert set(failures(stalled.url)) == {"ReadModels"}


def test_the_failure_is_cleared_once_the_projection_applies_events_again(stalled):
    harmless = query(
        stalled.url, "SELECT DISTINCT topic FROM ledger.ledger_events WHERE notification_id < %s", stalled.bad
    )
    topic = next(row["topic"] for row in harmless if not handles(ReadModelsProjection, row["topic"]))
    query(
        stalled.url,
        "UPDATE ledger.ledger_events SET topic = %s WHERE notification_id = %s",
        topic,
        stalled.bad,
    )
    eventually(lambda: "ReadModels" not in failures(stalled.url) and position(stalled.url) == stalled.head)


def test_projections_status_shows_the_last_error_and_exits_1(stalled, capsys):
    assert run("projections", "status") == 1
    out = capsys.readouterr().out
    stall = next(line for line in out.splitlines() if line.startswith("stalled: ReadModels"))
    assert f"at position {stalled.bad - 1} of {stalled.head}" in stall
    assert f"on notification {stalled.bad}" in stall and "AttributeError" in stall
    assert not any(line.startswith("stalled:") and "ReadModels" not in line for line in out.splitlines())


def test_audit_verify_fails_on_a_stalled_projection(stalled, capsys):
    assert run("audit", "verify") == 1
    out = capsys.readouterr().out
    assert re.search(r"^FAILED +projections keep up$", out, re.MULTILINE)
    assert f"ReadModels at position {stalled.bad - 1} of {stalled.head}" in out
    assert f"on notification {stalled.bad}" in out
    assert re.search(r"^OK +read model ReadModels$", out, re.MULTILINE)  # equal to a rebuild where it is


@pytest.fixture
def one_life(database_url: str) -> Iterator[str]:
    with own_database(database_url) as url:
        ledger = new_ledger(url)
        try:
            Flows(ledger).lives(1)
        finally:
            ledger.close()
        yield url


def states_at(url: str, now: datetime) -> dict[str, status.ProjectionState]:
    app = log_app(url)
    try:
        with psycopg.connect(url, autocommit=True) as conn:
            found = status.states(conn, NAMES, head_of(url), status.event_time(app), now=now)
    finally:
        app.close()
    return {state.name: state for state in found}


def test_a_lag_counts_by_the_age_of_the_oldest_unapplied_event(one_life):
    now = datetime.now(UTC)
    fresh = states_at(one_life, now)
    assert all(state.position == 0 and state.head > 0 for state in fresh.values())
    assert not any(state.stalled(30) for state in fresh.values())  # behind, but only for a moment
    later = states_at(one_life, now + timedelta(minutes=2))
    assert all(state.behind_seconds >= 110 and state.stalled(30) for state in later.values())
    catch_up(one_life)
    idle = states_at(one_life, now + timedelta(hours=1))
    assert all(state.behind_seconds == 0 and not state.stalled(30) for state in idle.values())


def test_audit_verify_passes_with_a_young_lag_and_fails_past_the_threshold(one_life, tmp_path, monkeypatch):
    monkeypatch.setenv(DATABASE_URL_ENV, one_life)
    monkeypatch.setenv(VAR_ENV, str(tmp_path / "var"))
    catch_up(one_life, tuple(spec for spec in PROJECTIONS if spec.name == "AuditChain"))  # the others lag
    assert run("audit", "verify") == 0
    time.sleep(1.2)
    monkeypatch.setenv(status.STALL_SECONDS_ENV, "1")
    assert run("audit", "verify") == 1
    assert run("projections", "status") == 1


def test_a_failing_projection_is_retried_after_a_pause_that_doubles_up_to_a_cap():
    worker = ProjectionWorker("postgresql://unused/db", [READ_MODELS], retry_seconds=2)
    pauses = [worker.pause(failures_in_a_row) for failures_in_a_row in range(8)]
    assert pauses == [2, 2, 4, 8, 16, MAX_RETRY_SECONDS, MAX_RETRY_SECONDS, MAX_RETRY_SECONDS]
