"""Two replicas on one database: two `broker-ledger serve --no-projections` processes (one worker each, own
ports, one var directory, so one signing key) and two `broker-ledger projections run` processes, all on one
database of the private cluster, under the mixed load of the conservation test (buys sent out, sells paid
out, some BLOCKED, the operator's moves), each flow's broker on one replica and its operator on the other.
Half way, one projections process is killed (SIGKILL) and started again, so the other takes over.

What must hold across the replicas:
- trust-level limits: rounds of 16 buys for a customer near its daily limit, sent through both replicas at
  once, admit exactly the buys that fit; both replicas then show the same used amount, never over the limit;
- the books: every snapshot of the postings balances (`books`), and at the end each reserve moved by exactly
  what the flows moved;
- projections: each projection's advisory lock (`ProjectionSpec.lock_key`) is held by at most one backend
  in every sample of `pg_locks`, only by the projections processes, and every read model catches up;
- callbacks: every status change goes to a loopback receiver exactly once (counted by `webhook-id`), the
  outbox shows each delivered at its first attempt, and both replicas delivered some.
"""

from __future__ import annotations

import contextlib
import re
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import psycopg
import pytest

from application.settings import DEFAULT_SETTINGS, load_settings
from projections.catalog import PROJECTIONS
from tests.e2e.support import Api, api_client
from tests.processes import ApiServer, ProjectionsRun
from tests.receivers import Receiver, receiving, settings_with_callbacks, wait_until
from tests.resilience.books import Auditor
from tests.resilience.cluster import PrivateCluster
from tests.resilience.conftest import HEALTHY_WITHIN_SECONDS
from tests.resilience.load import customers_for
from tests.resilience.replicas import (
    ADVISORY_LOCKS,
    LimitRaces,
    Watch,
    buys_in_read_model,
    wait_for_projections,
)
from tests.resilience.test_conservation import (
    caught_up_snapshot,
    check_reserves_moved_as_the_flows,
    fund_the_reserves,
)
from tests.resilience.trading import Expected, Traders, buy_and_send_out, move_and_back, sell_and_pay_out

REPLICAS = ("replica-a", "replica-b")
RUNNERS = ("projections-1", "projections-2")
# Every process keeps few connections (see the figures this test reports): one kept open for the event
# store, up to three for the API's own tables, two callback senders that poll often.
PROCESS_ENV = {
    "BROKER_LEDGER_CALLBACK_SENDERS": "2",
    "BROKER_LEDGER_CALLBACK_POLL_SECONDS": "0.1",
}
CATCH_UP_SECONDS = 30.0
TAKEOVER_SECONDS = 15.0
DELIVERED_METRIC = re.compile(r'^broker_ledger_callback_attempts_total\{outcome="delivered"\} (\S+)$', re.M)


@pytest.fixture
def replica_load_seconds(request: pytest.FixtureRequest) -> float:
    """How long the replicas trade: 4 s by default (CI: a runner is killed after 2 s and taken over, every
    flow, limit race and callback still happens), 120 s with --run-slow."""
    return 120.0 if request.config.getoption("--run-slow") else 4.0


@dataclass
class Fleet:
    database_url: str
    replicas: list[ApiServer]
    runners: list[ProjectionsRun]
    tokens: dict[str, str]
    receiver: Receiver
    watch: Watch
    started_in: float

    @property
    def base_urls(self) -> tuple[str, str]:
        return self.replicas[0].base_url, self.replicas[1].base_url

    def client(self, replica: int, client_id: str = "demo-broker") -> Api:
        return api_client(self.replicas[replica].base_url, self.tokens[client_id])

    def logs(self) -> str:
        named = zip(REPLICAS + RUNNERS, self.replicas + self.runners, strict=True)
        return "\n".join(f"--- {name}\n{process.tail(30)}" for name, process in named)


@pytest.fixture
def fleet(private_cluster: PrivateCluster, tmp_path: Path) -> Iterator[Fleet]:
    database_url = private_cluster.create_database(f"replicas_{uuid.uuid4().hex[:12]}")
    var = tmp_path / "var"
    began = time.monotonic()
    with receiving(Receiver(), url_host="localhost") as receiver:
        settings = settings_with_callbacks(tmp_path / "settings.toml", receiver.url)
        env = {**PROCESS_ENV, "BROKER_LEDGER_SETTINGS": str(settings)}
        replicas = [
            ApiServer(
                database_url, var, tmp_path / f"{name}.log", workers=1, options=("--no-projections",), env=env
            )
            for name in REPLICAS
        ]
        runners = [ProjectionsRun(database_url, var, tmp_path / f"{name}.log", env=env) for name in RUNNERS]
        started = dict(zip(REPLICAS + RUNNERS, replicas + runners, strict=True))
        watch = Watch(database_url, lambda: {name: process.pid for name, process in started.items()})
        try:
            replicas[0].start()  # first and alone: it creates the var directory's credentials
            watch.start()
            for runner in runners:
                runner.start()
            replicas[1].start()
            # from one replica, used on both: they share the signing key
            tokens = {client: replicas[0].token(client) for client in ("demo-broker", "demo-operator")}
            yield Fleet(database_url, replicas, runners, tokens, receiver, watch, time.monotonic() - began)
        finally:
            watch.stop()
            codes = {name: r.stop() for name, r in zip(REPLICAS + RUNNERS, replicas + runners, strict=True)}
    assert all(code == 0 for code in codes.values()), f"exit codes on SIGTERM: {codes}"


def start_flows(traders: Traders, fleet: Fleet, stack: contextlib.ExitStack, expected: Expected) -> None:
    """Two buyers and two sellers and a mover; each flow's broker talks to one replica and its operator to
    the other, so every transaction is created on one and moved on by the other."""

    def client(replica: int, client_id: str = "demo-broker") -> Api:
        return stack.enter_context(fleet.client(replica, client_id))

    customers = customers_for(client(0), 4)
    flows: list[Callable[[int], None]] = []
    for number, customer in enumerate(customers):
        b, o = client(number % 2), client(1 - number % 2, "demo-operator")
        if number < 2:
            flows.append(lambda n, b=b, o=o, c=customer: buy_and_send_out(b, o, c, expected, n % 3 == 0))
        else:
            flows.append(lambda n, b=b, o=o, c=customer: sell_and_pay_out(b, o, c, expected, n % 5 == 4))
    mover = client(1, "demo-operator")
    cold = (f"cold-{uuid.uuid4().hex[:8]}", "ColdStore")
    flows.append(lambda n: move_and_back(mover, cold, expected))
    for flow in flows:
        traders.start(flow)


def kill_and_restart_a_runner(fleet: Fleet) -> tuple[str, float]:
    """SIGKILLs the projections process holding most projections' locks and starts it again; returns its
    name and the seconds until every projection's lock was held again (by the other one, at first)."""
    with psycopg.connect(fleet.database_url, autocommit=True) as connection:
        held = locks_held(connection, fleet.watch)
        victim = Counter(held.values()).most_common(1)[0][0]
        runner = fleet.runners[RUNNERS.index(victim)]
        killed = time.monotonic()
        runner.kill()
        assert wait_until(
            lambda: (
                len(locks_held(connection, fleet.watch)) == len(PROJECTIONS)
                and victim not in locks_held(connection, fleet.watch).values()
            ),
            TAKEOVER_SECONDS,
            interval=0.05,
        ), f"the projections were not taken over within {TAKEOVER_SECONDS} s\n{fleet.logs()}"
        took = time.monotonic() - killed
    runner.start()
    return victim, took


def locks_held(connection: psycopg.Connection, watch: Watch) -> dict[str, str]:
    """projection name -> the process whose backend holds its lock."""
    rows = connection.execute(ADVISORY_LOCKS).fetchall()
    return {watch.names[c, o]: watch.owner(port) for c, o, _, port in rows if (c, o) in watch.names}


def pending_callbacks(database_url: str) -> int:
    with psycopg.connect(database_url, autocommit=True, connect_timeout=10) as connection:
        return connection.execute(
            "SELECT count(*) FROM read.callback_outbox WHERE status = 'pending'"
        ).fetchone()[0]


def check_outbox(database_url: str, received: Counter) -> dict[str, int]:
    """Every outbox row delivered at its first attempt, one attempt row each, and exactly the events the
    receiver got; returns the outbox's statuses."""
    with psycopg.connect(database_url, autocommit=True, connect_timeout=10) as connection:
        statuses = dict(
            connection.execute("SELECT status, count(*) FROM read.callback_outbox GROUP BY 1").fetchall()
        )
        again = connection.execute(
            "SELECT event_id, attempts FROM read.callback_outbox WHERE attempts <> 1 LIMIT 10"
        ).fetchall()
        attempted_twice = connection.execute(
            "SELECT event_id, count(*) FROM read.callback_attempts GROUP BY 1 HAVING count(*) > 1 LIMIT 10"
        ).fetchall()
        ids = {row[0] for row in connection.execute("SELECT event_id FROM read.callback_outbox").fetchall()}
    assert statuses.keys() == {"delivered"}, statuses
    assert not again, f"deliveries attempted other than once: {again}"
    assert not attempted_twice, f"deliveries with more than one attempt recorded: {attempted_twice}"
    assert ids == set(received), (
        f"{len(ids - set(received))} outbox rows never received, {len(set(received) - ids)} received events"
        " not in the outbox"
    )
    return statuses


def delivered_by(replica: ApiServer) -> int:
    text = httpx.get(f"{replica.base_url}/metrics", timeout=10).text
    found = DELIVERED_METRIC.search(text)
    return int(float(found.group(1))) if found else 0


def test_two_replicas_and_two_projection_runners_on_one_database_keep_every_guarantee(
    fleet: Fleet, replica_load_seconds: float, report
) -> None:
    url = fleet.database_url
    for replica in fleet.replicas:
        replica.wait_until_healthy(HEALTHY_WITHIN_SECONDS)
    with fleet.client(0, "demo-operator") as operator:
        fund_the_reserves(operator)
    before = caught_up_snapshot(url)
    assert not before.problems, before.problems[:10]
    expected, traders, auditor = Expected(), Traders(), Auditor(url)
    limit = load_settings(DEFAULT_SETTINGS).trust_levels["Basic"].limit("buy", "daily")
    with contextlib.ExitStack() as stack:
        races = LimitRaces(
            fleet.base_urls,
            fleet.tokens["demo-broker"],
            stack.enter_context(fleet.client(1, "demo-operator")),
            expected,
            limit,
        )
        start_flows(traders, fleet, stack, expected)
        traders.start(races.run_round)
        auditor.start()
        time.sleep(replica_load_seconds / 2)
        victim, takeover = kill_and_restart_a_runner(fleet)
        time.sleep(replica_load_seconds / 2)
        traders.stop()
        auditor.stop()
    assert not traders.errors, f"{len(traders.errors)} flows failed: {traders.errors[:3]}\n{fleet.logs()}"

    # trust-level limits
    assert races.rounds > 0
    assert not races.problems, races.problems[:10]
    caught_up, found, head = wait_for_projections(url, CATCH_UP_SECONDS)
    assert min(found.values()) >= head, f"the projections stayed behind the log's {head}: {found}"
    assert buys_in_read_model(url, list(races.customers)) == races.customers

    # the books
    assert not auditor.errors, auditor.errors
    assert auditor.taken > 0
    assert not auditor.problems, auditor.problems[:10]
    after = caught_up_snapshot(url)
    assert not after.problems, after.problems[:10]
    check_reserves_moved_as_the_flows(before, after, expected)

    # one process per projection
    fleet.watch.stop()
    assert not fleet.watch.errors, fleet.watch.errors
    assert fleet.watch.samples > 0
    assert not fleet.watch.overlaps, fleet.watch.overlaps
    assert set(fleet.watch.holders) == {spec.name for spec in PROJECTIONS}, dict(fleet.watch.holders)
    holders = {app for counted in fleet.watch.holders.values() for app in counted}
    assert holders <= set(RUNNERS), f"a projection ran outside the projections processes: {holders}"

    # callbacks: each event once
    assert wait_until(lambda: pending_callbacks(url) == 0, CATCH_UP_SECONDS, interval=0.2), fleet.logs()
    received = Counter(item.event_id for item in fleet.receiver.snapshot())
    twice = {event_id: count for event_id, count in received.items() if count > 1}
    assert received, "the receiver got no callback"
    assert not twice, f"{len(twice)} events delivered more than once: {list(twice.items())[:5]}"
    assert all(item.ok for item in fleet.receiver.snapshot())
    statuses = check_outbox(url, received)
    by_replica = {name: delivered_by(r) for name, r in zip(REPLICAS, fleet.replicas, strict=True)}
    assert sum(by_replica.values()) == len(received), (by_replica, len(received))

    report(
        seconds=replica_load_seconds,
        started_in=round(fleet.started_in, 1),
        flows=dict(expected.flows),
        limit_rounds=races.rounds,
        admitted_per_round=dict(races.admitted),
        race_statuses=dict(races.statuses),
        snapshots=auditor.taken,
        postings=after.postings,
        events=head,
        caught_up_in=round(caught_up, 2),
        lock_samples=fleet.watch.samples,
        lock_holders={name: dict(counted) for name, counted in fleet.watch.holders.items()},
        killed=victim,
        takeover_seconds=round(takeover, 2),
        callbacks=len(received),
        delivered_by=by_replica,
        outbox=statuses,
        peak_connections=fleet.watch.peak_total,
        peak_connections_by_process=dict(fleet.watch.peak_by_process),
    )
    assert all(by_replica.values()), f"one replica delivered no callback: {by_replica}"
