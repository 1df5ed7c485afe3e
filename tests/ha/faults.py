"""What the failover tests (and bench/ha_failover.py) do to the topology's primary, and how they watch
Patroni answer: the faults (its PostgreSQL killed, or its machine hung), the new primary, the old one's
return as a standby. Only the standard library, psycopg and tests/ha/cluster.py: no pytest."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from typing import Any

import psycopg

from tests.ha.cluster import Cluster, Node

FAILOVER_WITHIN_SECONDS = 45.0
REJOIN_WITHIN_SECONDS = 90.0  # pg_rewind and a restart, on a machine busy with the rest of the suite
Fault = Callable[[Cluster, Node], Callable[[], None]]  # does the fault; returns what undoes it


class TimedOut(AssertionError):
    """What `wait_for` waited for did not come (a failed test; the benchmarks' runs end with it)."""


def kill(cluster: Cluster, node: Node) -> Callable[[], None]:
    """The node's postmaster SIGKILLed: its PostgreSQL is gone at once (Patroni fails over, as
    primary_start_timeout is 0)."""
    pid = node.postmaster_pid()
    assert pid is not None, f"{node.name} runs no postmaster"
    send(pid, signal.SIGKILL)
    return lambda: None


def hang(cluster: Cluster, node: Node) -> Callable[[], None]:
    """The node's machine hangs (its Patroni and its PostgreSQL stopped with SIGSTOP, as a frozen VM would
    be): its leader key expires after ttl and the synchronous standby is promoted; once resumed (SIGCONT) the
    old primary finds its lock gone, demotes itself and rejoins."""
    pids = [cluster.pids[node.name], *node.postgres_pids()]
    assert len(pids) > 1, f"{node.name} runs no postgres"
    for pid in pids:  # Patroni, then the postmaster, so that no new child is forked meanwhile
        send(pid, signal.SIGSTOP)

    def resume() -> None:
        for pid in reversed(pids):
            send(pid, signal.SIGCONT)

    return resume


def leader(cluster: Cluster) -> Node:
    found = cluster.leader()
    assert found is not None, f"no primary\n{cluster.describe()}"
    return found


def other_leader(cluster: Cluster, old: Node) -> Node | None:
    """The running leader, once it is another node than `old` and out of recovery (promoted)."""
    found = cluster.leader()
    if found is None or found.name == old.name:
        return None
    with connect(found) as connection:
        return None if one(connection, "SELECT pg_is_in_recovery()") else found


def rejoined(cluster: Cluster, old: Node, new: Node) -> bool:
    """`old` streams from `new` as a standby, on its timeline, and the topology is whole again."""
    members = {member["name"]: member for member in cluster.members()}
    primary, former = members.get(new.name, {}), members.get(old.name, {})
    return (
        cluster.healthy()
        and primary.get("role") == "leader"
        and former.get("role") in ("replica", "sync_standby")
        and former.get("timeline") == primary.get("timeline")
    )


@contextmanager
def connect(node: Node, database: str = "postgres") -> Iterator[psycopg.Connection]:
    with psycopg.connect(node.url(database), autocommit=True, connect_timeout=3) as connection:
        yield connection


def one(connection: psycopg.Connection, query: str) -> Any:
    row = connection.execute(query).fetchone()
    assert row is not None
    return row[0]


def send(pid: int, signum: int) -> None:
    with suppress(ProcessLookupError):
        os.kill(pid, signum)


def wait_for(
    condition: Callable[[], Any], timeout: float, what: str | Callable[[], str], why: str = ""
) -> Any:
    """`condition()`'s first true value within `timeout` s (a database error counts as not yet); else
    TimedOut, saying what it waited for (and `why`, e.g. a client's last errors)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            value = condition()
        except psycopg.Error:
            value = None
        if value:
            return value
        time.sleep(0.2)
    what = what() if callable(what) else what
    why = why() if callable(why) else why
    raise TimedOut(f"timed out after {timeout:.0f} s waiting for {what}{why}")
