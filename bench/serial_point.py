"""Where the buys wait: the serial point of the write path, measured during a run of bench/load.py.

Every save of the cluster passes one point one at a time: the events table's lock, which a group commit
(`application.store.group_commit`) holds from before its notification ids are drawn until its COMMIT has
returned, so that ids become visible in commit order. Whatever a batch does while it holds the lock (insert
its events, raise the write positions, flush its commit to the WAL) every other process's batch waits for.
So the lock allows at most (buys per commit) / (time held per commit) buys per second, however many cores
there are: the *ceiling*, a figure measured on 2 cores as well as on 16.

Two sources, both read during the run:
- The API's `/metrics` (added up over its workers), before and after: the group committer's transactions
  with events (`broker_ledger_events_lock_held_seconds`, count and sum: commits and time held; each batch
  reads the server's clock right after its lock is granted and stops the clock when its COMMIT answers),
  and the events they wrote. Buys per commit = buys stored in the run / commits.
- `pg_stat_activity` and `pg_locks`, sampled every `INTERVAL` seconds on one connection: what each active
  backend of the service waits for (`wait_event_type`: Lock, LWLock, IO, Client, IPC, ...; none = on CPU),
  as shares of the samples, for the API's connections and the projections' apart; and whether the events
  table's lock was held at that instant (its busy share, which the hold times give too).
The sampling itself costs a query every few ms (and the lock manager's partitions for `pg_locks`): it is one
client among hundreds of connections, and the floor runs without it.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import httpx
import psycopg
from prometheus_client.parser import text_string_to_metric_families

from bench.load_support import Poller

INTERVAL = 0.01  # seconds between samples
HELD = "broker_ledger_events_lock_held_seconds"
EVENTS = "broker_ledger_group_commit_events"
ONE_BY_ONE = "broker_ledger_group_commit_one_by_one"
CONFLICTS = "broker_ledger_group_commit_conflicts"
ACTIVITY = """
SELECT coalesce(wait_event_type, 'CPU'), coalesce(wait_event, 'CPU'), application_name LIKE %(projections)s,
       count(*)
FROM pg_stat_activity
WHERE datname = current_database() AND state = 'active' AND pid <> pg_backend_pid()
  AND application_name LIKE 'broker-ledger%%'
GROUP BY 1, 2, 3
"""
LOCK_HOLDER = """
SELECT EXISTS (SELECT FROM pg_locks WHERE locktype = 'relation' AND granted AND mode = 'ExclusiveLock'
               AND relation = to_regclass('ledger.ledger_events'))
"""
WAIT_CLASSES = (
    "CPU",
    "Lock",
    "LWLock",
    "IO",
    "Client",
    "IPC",
    "Timeout",
    "Activity",
    "BufferPin",
    "Extension",
)


@dataclass(frozen=True)
class CommitCounters:
    """The group committer's counters of the API's workers, added up, at one instant."""

    commits: float = 0.0  # transactions that took the events table's lock
    held_seconds: float = 0.0
    events: float = 0.0
    one_by_one: float = 0.0  # of those, batches written save by save after a refusal
    conflicts: float = 0.0  # saves refused for a version another save took, before the lock

    def __sub__(self, earlier: CommitCounters) -> CommitCounters:
        return CommitCounters(
            *(getattr(self, name) - getattr(earlier, name) for name in self.__dataclass_fields__)
        )


def commit_counters(base_url: str) -> CommitCounters:
    """Scrapes `GET /metrics` of the API for the committer's counters."""
    text = httpx.get(f"{base_url}/metrics", timeout=10).text
    found: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found[sample.name] = found.get(sample.name, 0.0) + sample.value
    return CommitCounters(
        *(found.get(name, 0.0) for name in (f"{HELD}_count", f"{HELD}_sum", f"{EVENTS}_total")),
        *(found.get(f"{name}_total", 0.0) for name in (ONE_BY_ONE, CONFLICTS)),
    )


@dataclass
class WaitSamples:
    """What the sampled backends waited for: counts of (wait type, wait event) per side (api, projections),
    the samples taken, and those in which the events table's lock was held."""

    waits: dict[str, Counter[tuple[str, str]]] = field(
        default_factory=lambda: {"api": Counter(), "projections": Counter()}
    )
    samples: int = 0
    lock_held: int = 0

    def shares(self, side: str) -> dict[str, float]:
        """Share (%) of the side's active-backend samples per wait type."""
        counts = self.waits[side]
        total = sum(counts.values()) or 1
        by_type: Counter[str] = Counter()
        for (kind, _), count in counts.items():
            by_type[kind] += count
        return {kind: 100 * by_type[kind] / total for kind in by_type}

    def top(self, side: str, count: int = 4) -> list[tuple[str, float]]:
        counts = self.waits[side]
        total = sum(counts.values()) or 1
        return [(f"{kind}:{event}", 100 * n / total) for (kind, event), n in counts.most_common(count)]

    def active(self, side: str) -> float:
        """Backends of the side active on average."""
        return sum(self.waits[side].values()) / max(self.samples, 1)


class WaitSampler(Poller):
    """Samples `pg_stat_activity` and the events table's lock every INTERVAL in a thread (see above)."""

    name = "wait sampler"

    def __init__(self, url: str) -> None:
        super().__init__(url, INTERVAL)
        self.found = WaitSamples()

    def sample(self, conn: psycopg.Connection[Any]) -> None:
        rows = conn.execute(ACTIVITY, {"projections": "broker-ledger projection%"}).fetchall()
        held = conn.execute(LOCK_HOLDER).fetchone()
        for kind, event, projections, count in rows:
            self.found.waits["projections" if projections else "api"][(kind, event)] += count
        self.found.samples += 1
        self.found.lock_held += bool(held and held[0])


@dataclass(frozen=True)
class SerialPoint:
    """The serial point's figures of one run: the committer's counters over the run, the buys it stored, the
    run's seconds, and the sampled waits."""

    counters: CommitCounters
    buys: int
    seconds: float
    samples: WaitSamples

    @property
    def commits_per_second(self) -> float:
        return self.counters.commits / self.seconds if self.seconds else 0.0

    @property
    def events_per_commit(self) -> float:
        return self.counters.events / self.counters.commits if self.counters.commits else 0.0

    @property
    def buys_per_commit(self) -> float:
        return self.buys / self.counters.commits if self.counters.commits else 0.0

    @property
    def held_ms(self) -> float:
        """Mean time a commit held the events table's lock."""
        return 1000 * self.counters.held_seconds / self.counters.commits if self.counters.commits else 0.0

    @property
    def busy_share(self) -> float:
        """Share (%) of the run the lock was held, from the hold times."""
        return 100 * self.counters.held_seconds / self.seconds if self.seconds else 0.0

    @property
    def sampled_busy_share(self) -> float:
        return 100 * self.samples.lock_held / max(self.samples.samples, 1)

    @property
    def ceiling(self) -> float:
        """Buys per second the lock allows: buys per commit / time held per commit."""
        return self.buys_per_commit / (self.held_ms / 1000) if self.held_ms else 0.0
