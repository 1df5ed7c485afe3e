"""A process's live projections run in one pass on one connection (`projections.live`): every projection it
leads reaches the head of the log, a projection that cannot apply an event stops alone while the others go
on past it, and two workers share the projections, one lock each, the survivor taking over the other's."""

from __future__ import annotations

import time
from collections.abc import Iterator

import psycopg
import pytest

from projections import live, status
from projections.catalog import PROJECTIONS
from projections.lanes import read_page
from projections.live import CONNECTION_NAME, NOTIFY_WAIT_SECONDS, ROUND_SECONDS, ProjectionWorker
from tests.application.conftest import use_cases_of
from tests.projections.audit_support import lives, new_ledger, query
from tests.projections.stall_support import eventually, failures, head_of, insert_unappliable_event

NAMES = [spec.name for spec in PROJECTIONS]


def positions(url: str) -> dict[str, int]:
    with psycopg.connect(url, autocommit=True) as conn:
        return status.positions(conn, NAMES)


def connections_named(url: str, name: str) -> int:
    rows = query(
        url,
        "SELECT count(*) AS n FROM pg_stat_activity"
        " WHERE datname = current_database() AND application_name = %s",
        f"broker-ledger {name}",
    )
    return rows[0]["n"]


@pytest.fixture
def worker(traded: str) -> Iterator[ProjectionWorker]:
    running = ProjectionWorker(traded, PROJECTIONS, retry_seconds=0.1)
    running.start()
    try:
        yield running
    finally:
        running.stop()


def test_a_worker_runs_every_projection_to_the_head_on_one_connection(traded, worker):
    assert worker.running.wait(15), "the worker did not take every projection"
    eventually(lambda: set(positions(traded).values()) == {head_of(traded)})
    lives(traded, "b")  # written while it runs: NOTIFY wakes it
    eventually(lambda: set(positions(traded).values()) == {head_of(traded)})
    assert connections_named(traded, CONNECTION_NAME) == 1
    assert connections_named(traded, "projection ReadModels") == 0


def test_an_idle_worker_reads_the_log_only_when_notified_or_every_half_second(traded, monkeypatch):
    pages_read = []
    monkeypatch.setattr(live, "read_page", lambda *args: pages_read.append(args) or read_page(*args))
    worker = ProjectionWorker(traded, PROJECTIONS, retry_seconds=0.1)
    worker.start()
    try:
        assert worker.running.wait(15)
        eventually(lambda: set(positions(traded).values()) == {head_of(traded)})
        time.sleep(0.3)  # well past the look at the locks: every projection is this worker's
        before = len(pages_read)
        time.sleep(2)
        assert len(pages_read) - before <= 2 / NOTIFY_WAIT_SECONDS + 1
    finally:
        worker.stop()


def test_under_a_trickle_of_writes_a_round_starts_at_most_every_round_seconds(traded, monkeypatch):
    pages_read = []
    monkeypatch.setattr(live, "read_page", lambda *args: pages_read.append(args) or read_page(*args))
    worker = ProjectionWorker(traded, PROJECTIONS, retry_seconds=0.1)
    worker.start()
    ledger = new_ledger(traded)
    use_cases = use_cases_of(ledger)
    try:
        assert worker.running.wait(15)
        eventually(lambda: set(positions(traded).values()) == {head_of(traded)})
        before, started = len(pages_read), time.monotonic()
        for number in range(100):  # a commit (and its NOTIFY) every few ms: about 100 in a second
            use_cases.customers.register_customer("demo", f"trickle-{number}", "Basic")
            time.sleep(0.005)
        rounds, seconds = len(pages_read) - before, time.monotonic() - started
        assert rounds <= seconds / ROUND_SECONDS + 3, f"{rounds} rounds in {seconds:.2f} s"
        eventually(lambda: set(positions(traded).values()) == {head_of(traded)})
    finally:
        ledger.close()
        worker.stop()


def test_the_other_projections_go_on_past_the_event_some_of_them_cannot_apply(traded, worker):
    assert worker.running.wait(15)
    bad = insert_unappliable_event(traded)  # a commit of no known transaction: the log's own hashes apply it
    lives(traded, "b")
    stopped = {"ReadModels", "Postings", "EventsFeed", "CallbackOutbox"}
    eventually(lambda: stopped <= set(failures(traded)))
    eventually(lambda: positions(traded)["AuditChain"] == head_of(traded))
    assert set(failures(traded)) == stopped
    for name in stopped:  # stopped at the event, retried, never skipped
        assert positions(traded)[name] == bad - 1
        assert failures(traded)[name].notification_id == bad


def test_two_workers_share_the_projections_and_the_survivor_takes_the_others_over(traded):
    first = ProjectionWorker(traded, PROJECTIONS, retry_seconds=0.1)
    second = ProjectionWorker(traded, PROJECTIONS, retry_seconds=0.1)
    first.start()
    try:
        assert first.running.wait(15)
        second.start()
        time.sleep(0.5)  # several looks at the locks: all are the first's
        assert not second.running.is_set()
        assert connections_named(traded, CONNECTION_NAME) == 2
        first.stop()
        assert second.running.wait(15), "the second worker did not take the projections over"
        lives(traded, "b")
        eventually(lambda: set(positions(traded).values()) == {head_of(traded)})
    finally:
        first.stop()
        second.stop()
