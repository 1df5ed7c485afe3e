"""`broker-ledger projections run --processes 2` beside a real `serve --no-projections`, while buys with a
callback URL keep arriving through the HTTP API: one runner is killed (SIGKILL) with its supervisor held, so
the other takes its projections over; the supervisor then starts it again, and it gets them back; then the
other is killed. Once the
writes stop and the projections catch up, no effect was lost or repeated: every projection is at the head of
the log, `audit verify` passes (postings balance, every read model equals a rebuild, the audit chain links
every event once), every callback was delivered exactly once, and a rebuild writes the rows the runners wrote.
Runners whose supervisor is killed stop of themselves, letting their projections go.

It starts processes on the suite's server: its module belongs with the process tests (see
`tests/conftest.py`, PROCESS_MODULES)."""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest

from application.store.database import CONNECTIONS_ENV, DATABASE_URL_ENV, MIN_CONNECTIONS
from interface.app import PROJECTIONS_ENV
from projections.live import CONNECTION_NAME
from tests.e2e.support import AddressSource, active_customer, local_callback_settings
from tests.processes import ApiServer, ProjectionsRun, running_server
from tests.projections.audit_support import lives, own_database
from tests.projections.runner_support import Buying, all_at_head, projection_rows
from tests.projections.stall_support import eventually
from tests.projections.support import run_cli as run
from tests.receivers import Receiver, receiving

CALLBACKS = {  # sent at once, and again soon should one fail
    "BROKER_LEDGER_CALLBACK_POLL_SECONDS": "0.05",
    "BROKER_LEDGER_CALLBACK_RETRY_BASE_SECONDS": "0.05",
    "BROKER_LEDGER_CALLBACK_RETRY_CAP_SECONDS": "0.4",
}
STATUSES = 2  # callbacks of a buy created without `stage` and completed: Sending, COMPLETED


@dataclass
class Cluster:
    url: str
    server: ApiServer
    receiver: Receiver
    runners: ProjectionsRun


@pytest.fixture
def cluster(database_url: str, tmp_path: Path) -> Iterator[Cluster]:
    """A database of its own, a one-worker `serve` that runs no projection and delivers callbacks to a local
    receiver, and `projections run --processes 2` beside it, every projection led."""
    settings = tmp_path / "settings.toml"
    settings.write_text(local_callback_settings())
    env = {PROJECTIONS_ENV: "off", CONNECTIONS_ENV: str(MIN_CONNECTIONS), **CALLBACKS}
    var, log = tmp_path / "var", tmp_path / "server.log"
    with (
        own_database(database_url) as url,
        receiving(Receiver(), url_host="localhost") as receiver,
        running_server(url, var, log, workers=1, settings=settings, env=env) as server,
    ):
        runners = ProjectionsRun(url, var, tmp_path / "runners.log", processes=2)
        runners.start()
        try:
            runners.wait_for(r"leads projection", count=4)
            yield Cluster(url, server, receiver, runners)
        finally:
            runners.stop()


def delivered(url: str) -> tuple[int, int]:
    """(deliveries in the outbox, of which delivered)."""
    with psycopg.connect(url, autocommit=True) as conn:
        statement = "SELECT count(*), count(*) FILTER (WHERE status = 'delivered') FROM read.callback_outbox"
        return conn.execute(statement).fetchone()


def test_runners_killed_under_load_lose_and_repeat_no_effect(cluster, monkeypatch, capsys):
    runners = cluster.runners
    with cluster.server.client("demo-broker") as broker, cluster.server.client("demo-operator") as operator:
        customer = active_customer(broker, AddressSource()(), "Plus")
        with Buying(broker, operator, customer, cluster.receiver.url) as buying:
            buying.wait_for(5)
            with runners.supervisor_held():  # runner 1 is not started again before runner 0 takes over
                runners.kill_runner(1)
                for name in ("AuditChain", "CallbackOutbox"):
                    runners.wait_for(rf"runner 0 of 2 \(pid \d+\) leads projection {name} \(taken over\)")
            runners.wait_for(r"runner 1 of 2 started", count=2)
            for name in ("AuditChain", "CallbackOutbox"):  # alive again: its share goes back to it
                runners.wait_for(rf"runner 1 of 2 \(pid \d+\) leads projection {name} \(its own\)", count=2)
            buying.wait_for(len(buying.codes) + 5)
            runners.kill_runner(0)
            runners.wait_for(r"runner 0 of 2 started", count=2)
            buying.wait_for(len(buying.codes) + 5)
    codes = buying.codes

    eventually(lambda: all_at_head(cluster.url), seconds=30)
    eventually(lambda: delivered(cluster.url) == (STATUSES * len(codes),) * 2, seconds=30)
    received = Counter(item.event_id for item in cluster.receiver.snapshot())
    assert len(received) == STATUSES * len(codes) and set(received.values()) == {1}

    monkeypatch.setenv(DATABASE_URL_ENV, cluster.url)
    assert run("audit", "verify") == 0, capsys.readouterr().out
    assert runners.stop() == 0
    live = projection_rows(cluster.url)
    assert run("projections", "rebuild", "--processes", "1") == 0, capsys.readouterr().out
    assert projection_rows(cluster.url) == live
    assert len(live["transactions"]) == len(codes)


def test_runners_stop_of_themselves_when_their_supervisor_is_killed(database_url, tmp_path):
    with own_database(database_url) as url:
        lives(url, "a")
        runners = ProjectionsRun(url, tmp_path / "var", tmp_path / "runners.log", processes=2)
        runners.start()
        try:
            runners.wait_for(r"leads projection", count=4)
            pids = [runners.runner_pid(index) for index in (0, 1)]
            runners.kill_leader()
            runners.wait_for(r"the process that started it has ended; stopping", count=2)
            eventually(lambda: projection_connections(url) == 0)
            eventually(lambda: not any(running(pid) for pid in pids))
        finally:
            runners.stop()


def projection_connections(url: str) -> int:
    """The connections of running projections to the database at `url`."""
    with psycopg.connect(url, autocommit=True) as conn:
        statement = (
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE datname = current_database() AND application_name = %s"
        )
        return conn.execute(statement, (f"broker-ledger {CONNECTION_NAME}",)).fetchone()[0]


def running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True
