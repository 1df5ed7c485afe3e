"""Crash recovery: `broker-ledger projections run` is killed (SIGKILL) again and again in the middle of
catching up while customers keep trading. Once a last worker has caught up, every projection of the catalog
sits at the head of the log and equals a fresh rebuild, and the audit chain links every event exactly once: no
event was skipped or applied twice, because each projection commits its changes together with its position."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest

from application.store.database import eventsourcing_env
from application.store.log import EVENTS_SCHEMA, LedgerLog
from projections.audit import compare_with_rebuild
from projections.audit_chain_check import check_chain
from projections.audit_sql import small_pool
from projections.base.runner import ProjectionSpec
from projections.catalog import PROJECTIONS
from projections.live import PAGE_ENV
from tests.processes import ProjectionsRun
from tests.projections.audit_support import Flows, new_ledger, own_database, query


class Writers:
    """Threads living customers' lives on one ledger, `pause` seconds apart, until told to stop."""

    def __init__(self, url: str, threads: int, pause: float) -> None:
        self.ledger = new_ledger(url, pool_size=threads + 1)
        self.pause = pause
        self.stopping = threading.Event()
        self.errors: list[BaseException] = []
        self.threads = [
            threading.Thread(target=self._live, args=(Flows(self.ledger, prefix=prefix),), daemon=True)
            for prefix in "pqrstuvw"[:threads]
        ]

    def _live(self, flows: Flows) -> None:
        while not self.stopping.is_set():
            try:
                flows.customer_life()
            except BaseException as error:
                self.errors.append(error)
                return
            self.stopping.wait(self.pause)

    def __enter__(self) -> Writers:
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stopping.set()
        for thread in self.threads:
            thread.join(timeout=60)
        self.ledger.close()


@dataclass
class Crashes:
    """How often the worker was killed, and how often with events still to process (AuditChain behind)."""

    kills: int = 0
    behind: int = 0


@pytest.fixture
def worker(database_url: str, tmp_path: Path) -> Iterator[tuple[str, ProjectionsRun]]:
    """`broker-ledger projections run` on a database of its own, not started yet. Its pages are small: a
    backlog takes several transactions to catch up with, however fast they are, so that kills come in the
    middle of catching up."""
    with own_database(database_url) as url:
        runner = ProjectionsRun(url, tmp_path / "var", tmp_path / "worker.log", env={PAGE_ENV: "10"})
        try:
            yield url, runner
        finally:
            runner.stop()


def head(url: str) -> int:
    return query(url, "SELECT coalesce(max(notification_id), 0) AS n FROM ledger.ledger_events")[0]["n"]


def position(url: str, spec: ProjectionSpec) -> int:
    with psycopg.connect(url, autocommit=True) as connection:
        return position_on(connection, spec)


def position_on(connection: psycopg.Connection, spec: ProjectionSpec) -> int:
    """The projection's tracking position, read on `connection` (0 before its table exists)."""
    table = f"read.{spec.name.lower()}_tracking"
    if not connection.execute("SELECT to_regclass(%s) IS NOT NULL", [table]).fetchone()[0]:
        return 0
    return connection.execute(f"SELECT max(notification_id) FROM {table}").fetchone()[0] or 0


def expected_position(url: str, spec: ProjectionSpec) -> int:
    """The head of the log, or of the events the projection subscribes to if it names their topics."""
    topics = list(spec.projection_class.topics)
    if not topics:
        return head(url)
    sql = "SELECT coalesce(max(notification_id), 0) AS n FROM ledger.ledger_events WHERE topic = ANY(%s)"
    return query(url, sql, topics)[0]["n"]


def wait_for(
    condition: Callable[[], bool], what: str, worker: ProjectionsRun, timeout: float = 90, poll: float = 0.05
) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}; worker output:\n{worker.tail()}")
        time.sleep(poll)


def crash_repeatedly(
    url: str, worker: ProjectionsRun, *, kills: int, writers: int, pause: float, backlog: int, seed: int
) -> Crashes:
    """Kills the worker `kills` times, each time at a random point of catching up with a backlog of at
    least `backlog` events, while `writers` threads keep writing; then lets a last worker catch up."""
    rng = random.Random(seed)
    crashes = Crashes()
    chain = next(spec for spec in PROJECTIONS if spec.name == "AuditChain")
    with Writers(url, writers, pause) as writing, psycopg.connect(url, autocommit=True) as watch:
        for _ in range(kills):
            start = position(url, chain)
            wait_for(lambda start=start: head(url) >= start + backlog, "a backlog of events", worker)
            worker.start()
            target = start + rng.randint(1, backlog // 2)
            progressed = lambda target=target: position_on(watch, chain) >= target  # noqa: E731
            # polled closely (on one connection): a worker catches up with a page of 10 events in milliseconds
            wait_for(progressed, "the worker to make progress", worker, poll=0.002)
            worker.kill()
            crashes.kills += 1
            crashes.behind += position(url, chain) < head(url)  # killed with events still to process
        worker.start()
        time.sleep(rng.uniform(0.5, 1.5))  # the last worker runs alongside the writers for a while
    assert not writing.errors, writing.errors
    for spec in PROJECTIONS:
        expected = expected_position(url, spec)
        wait_for(lambda spec=spec, n=expected: position(url, spec) >= n, f"{spec.name} to catch up", worker)
    worker.stop()
    return crashes


def assert_nothing_skipped_or_applied_twice(url: str) -> None:
    events = query(url, "SELECT count(*) AS n FROM ledger.ledger_events")[0]["n"]
    log_app = LedgerLog(env=small_pool(eventsourcing_env(url, EVENTS_SCHEMA)))
    try:
        for spec in PROJECTIONS:
            assert position(url, spec) == expected_position(url, spec), spec.name
            check = compare_with_rebuild(url, log_app, spec)
            if check.status != "OK":
                pytest.fail(f"{spec.name} {check.status}:\n" + "\n".join(check.details), pytrace=False)
    finally:
        log_app.close()
    links = query(url, "SELECT count(*) AS n, max(seq) AS seq FROM read.audit_chain")[0]
    assert links == {"n": events, "seq": events}
    chain = check_chain(url)
    assert chain.status == "OK", chain.details


def test_read_models_equal_a_rebuild_after_the_worker_is_killed_mid_batch_repeatedly(worker):
    url, runner = worker
    crashes = crash_repeatedly(url, runner, kills=5, writers=2, pause=0.5, backlog=80, seed=20260310)
    assert crashes.kills == 5
    assert crashes.behind >= 4
    assert_nothing_skipped_or_applied_twice(url)


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_read_models_equal_a_rebuild_after_many_kills_under_heavier_writes(worker):
    url, runner = worker
    crashes = crash_repeatedly(url, runner, kills=25, writers=4, pause=0.05, backlog=300, seed=7)
    assert crashes.kills == 25
    assert crashes.behind >= 20
    assert_nothing_skipped_or_applied_twice(url)
