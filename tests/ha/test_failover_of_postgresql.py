"""PostgreSQL fails over under Patroni with nothing acknowledged lost (issue 36, the topology's part).

One topology for the module (tests/ha/conftest.py): a primary and two standbys, one of them synchronous. A
client commits rows through the multi-host URL in a loop and reconnects on errors while the primary's
PostgreSQL is killed (round 1) or hung with SIGSTOP (round 2); Patroni promotes the synchronous standby. Every
row whose commit returned must be on the new primary exactly once, the old primary must come back as a
standby with the same rows, and the time without acknowledged writes is printed (target < 30 s).
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
import pytest

from tests.ha import faults
from tests.ha.cluster import Cluster, Node
from tests.ha.faults import FAILOVER_WITHIN_SECONDS, REJOIN_WITHIN_SECONDS
from tests.ha.writer import Writer, longest_gap

NO_ACK_TARGET_SECONDS = 30.0
LOAD_BEFORE_FAULT_SECONDS = 1.5
LOAD_AFTER_FAILOVER_SECONDS = 1.0


@pytest.fixture(scope="module")
def probe(ha_cluster: Cluster) -> Cluster:
    with psycopg.connect(ha_cluster.url(), autocommit=True, connect_timeout=5) as connection:
        connection.execute(
            "CREATE TABLE IF NOT EXISTS ha_probe (id bigserial PRIMARY KEY, request bigint NOT NULL,"
            " round int NOT NULL, written_at timestamptz NOT NULL DEFAULT clock_timestamp())"
        )
    return ha_cluster


def test_a_commit_is_acknowledged_only_once_a_synchronous_standby_has_it(probe: Cluster, report: Any) -> None:
    cluster = probe
    cluster.wait_healthy(30)
    primary = faults.leader(cluster)
    sync = next(member["name"] for member in cluster.members() if member["role"] == "sync_standby")
    with faults.connect(primary) as connection:
        names = faults.one(connection, "SHOW synchronous_standby_names")
        states = connection.execute(
            "SELECT application_name, sync_state FROM pg_stat_replication WHERE state = 'streaming'"
        ).fetchall()
    assert names.strip('"') == sync, f"Patroni names {sync} as synchronous, PostgreSQL has {names!r}"
    assert sorted(state for _, state in states) == ["async", "sync"], states

    standbys = [node for node in cluster.nodes if node.name != primary.name]
    done = threading.Event()

    def commit() -> None:
        with faults.connect(primary) as connection:
            connection.execute("INSERT INTO ha_probe (request, round) VALUES (0, 0)")
        done.set()

    with _frozen(*standbys):
        writer = threading.Thread(target=commit, daemon=True)
        writer.start()
        assert not done.wait(2.0), "a commit returned while no standby could receive it"
        with faults.connect(primary) as connection:
            waiting = faults.one(
                connection, "SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'SyncRep'"
            )
        assert waiting == 1, "the held commit is not waiting for synchronous replication"
    assert done.wait(10.0), "the commit did not return once the standbys were back"
    writer.join(5)
    report(synchronous_standby_names=names, sync_states=dict(states), commit_waits_without_standby="yes")


def test_a_killed_primary_is_replaced_with_no_acknowledged_commit_lost(probe: Cluster, report: Any) -> None:
    report(**_failover_round(probe, 1, faults.kill))


def test_a_hung_primary_is_replaced_with_no_acknowledged_commit_lost(probe: Cluster, report: Any) -> None:
    """The primary's machine hangs (faults.hang): the synchronous standby is promoted, and the old primary,
    resumed, demotes itself and rejoins."""
    report(**_failover_round(probe, 2, faults.hang))


def test_the_loss_of_the_synchronous_standby_pauses_writes_only_until_the_other_is_named(
    probe: Cluster, report: Any
) -> None:
    """The synchronous standby's machine hangs (faults.hang): commits wait until Patroni names the other
    standby synchronous (Patroni 3.0.2 names one standby, not ANY 1 of two: docs/high-availability.md), then
    go on, with nothing acknowledged lost."""
    cluster = probe
    cluster.wait_healthy(REJOIN_WITHIN_SECONDS)
    primary = faults.leader(cluster)
    sync = cluster.node(_sync_standby(cluster))
    writer = Writer(cluster.url(), 3)
    writer.start()
    resume: Callable[[], None] = lambda: None  # noqa: E731
    try:
        _wait(lambda: len(writer.acked) >= 50, 20, "the writer's first commits", writer)
        time.sleep(LOAD_BEFORE_FAULT_SECONDS)
        resume = faults.hang(cluster, sync)
        fault_at = time.monotonic()
        other = _wait(
            lambda: (name := _sync_standby(cluster)) != sync.name and name,
            FAILOVER_WITHIN_SECONDS,
            "another synchronous standby",
            writer,
        )
        named_after = time.monotonic() - fault_at
        acked = len(writer.acked)
        _wait(lambda: len(writer.acked) >= acked + 20, FAILOVER_WITHIN_SECONDS, "commits again", writer)
    finally:
        resume()
        writer.stop()
    gap = longest_gap(writer.acked, fault_at)
    rows = _rows(primary, 3)
    lost = [request for request, _ in writer.acked if rows.get(request, 0) == 0]
    assert faults.leader(cluster).name == primary.name, "the primary changed"
    assert not lost, f"{len(lost)} acknowledged commits lost"
    assert gap < NO_ACK_TARGET_SECONDS, f"{gap:.1f} s without an acknowledged commit"
    cluster.wait_healthy(REJOIN_WITHIN_SECONDS)
    report(
        lost_standby=sync.name,
        named_synchronous=other,
        named_after_s=f"{named_after:.1f}",
        no_ack_s=f"{gap:.1f}",
        acknowledged=len(writer.acked),
        acknowledged_lost=len(lost),
    )


def _sync_standby(cluster: Cluster) -> str | None:
    return next((m["name"] for m in cluster.members() if m.get("role") == "sync_standby"), None)


def _failover_round(cluster: Cluster, round_: int, fault: faults.Fault) -> dict[str, Any]:
    """Load, the fault on the primary, Patroni's promotion, the old primary's return; the checks and the
    figures."""
    cluster.wait_healthy(REJOIN_WITHIN_SECONDS)
    old = faults.leader(cluster)
    writer = Writer(cluster.url(), round_)
    writer.start()
    resume: Callable[[], None] = lambda: None  # noqa: E731
    try:
        _wait(lambda: len(writer.acked) >= 50, 20, "the writer's first commits", writer)
        time.sleep(LOAD_BEFORE_FAULT_SECONDS)
        resume = fault(cluster, old)
        fault_at = time.monotonic()  # once the signals are sent: finding the processes takes a while
        new = _wait(
            lambda: faults.other_leader(cluster, old), FAILOVER_WITHIN_SECONDS, "a new primary", writer
        )
        promoted_after = time.monotonic() - fault_at
        _wait(lambda: writer.acked_by(new.pg_port) >= 20, FAILOVER_WITHIN_SECONDS, "commits on it", writer)
        time.sleep(LOAD_AFTER_FAILOVER_SECONDS)
    finally:
        resume()
        writer.stop()
    gap = longest_gap(writer.acked, fault_at)
    late = [at for (_, at), port in zip(writer.acked, writer.ports, strict=True) if port == old.pg_port]
    late = [at for at in late if at > fault_at]

    back = lambda: f"{old.name} back as a standby\n{cluster.describe()}\n{cluster.log_tail(40)}"  # noqa: E731
    _wait(lambda: faults.rejoined(cluster, old, new), REJOIN_WITHIN_SECONDS, back, writer)
    rows = _rows(new, round_)
    acked = [request for request, _ in writer.acked]
    lost = [request for request in acked if rows.get(request, 0) == 0]
    duplicates = [request for request, count in rows.items() if count > 1]
    _wait(
        lambda: _rows(old, round_) == rows, REJOIN_WITHIN_SECONDS, f"{old.name} to have the same rows", writer
    )

    assert not lost, f"{len(lost)} acknowledged commits lost, e.g. {lost[:5]}"
    assert not duplicates, f"rows written twice: {duplicates[:5]}"
    assert set(rows) <= set(acked) | set(writer.unanswered), "rows that no request wrote"
    assert gap < NO_ACK_TARGET_SECONDS, f"{gap:.1f} s without an acknowledged commit"
    return {
        "old_primary": old.name,
        "new_primary": new.name,
        "promoted_after_s": f"{promoted_after:.1f}",
        "no_ack_s": f"{gap:.1f}",
        "acked_by_old_primary_after_fault": len(late),
        "acknowledged": len(acked),
        "unanswered": len(writer.unanswered),
        "unanswered_committed": sum(1 for request in writer.unanswered if request in rows),
        "acknowledged_lost": len(lost),
        "duplicates": len(duplicates),
    }


def _rows(node: Node, round_: int) -> dict[int, int]:
    try:
        with faults.connect(node) as connection:
            found = connection.execute(
                "SELECT request, count(*) FROM ha_probe WHERE round = %s GROUP BY request", (round_,)
            ).fetchall()
    except psycopg.Error:
        return {}
    return dict(found)


@contextmanager
def _frozen(*nodes: Node) -> Iterator[None]:
    """The nodes' PostgreSQL processes stopped (SIGSTOP) for the block's length."""
    pids = [pid for node in nodes for pid in node.postgres_pids()]
    try:
        for pid in pids:
            faults.send(pid, signal.SIGSTOP)
        yield
    finally:
        for pid in reversed(pids):
            faults.send(pid, signal.SIGCONT)


def _wait(condition: Callable[[], Any], timeout: float, what: str | Callable[[], str], writer: Writer) -> Any:
    return faults.wait_for(
        condition, timeout, what, "; the writer's last errors:\n" + "\n".join(writer.errors[-5:])
    )
