"""Projection lag as a client sees it: how long after an event is in the store a projection has processed it.

A sampler thread polls, every few milliseconds on one connection, the head of the event log
(`SELECT max(notification_id) FROM ledger.ledger_events`) and each projection's position (its tracking row
in the `read` schema, as `broker-ledger projections status` reads it). Each newly observed head id is
stamped with the time it was first seen; for each projection, the time its position first reached (>=)
that id is stamped too. The lag of that id is the difference. Both stamps come from polls, so a lag is
exact to about one poll interval plus one query (a few ms), and a lag below that reads as 0.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg.sql import SQL, Identifier, Literal

from bench.load_support import Poller, scalar

EVENTS_TABLE = Identifier("ledger", "ledger_events")
READ_SCHEMA = "read"
APPLICATION = "Ledger"


def tracking_tables(url: str, expected: int, timeout: float = 60) -> list[str]:
    """The projections' tracking tables in the read schema, once all `expected` of them exist (the
    projections create them when they start, a moment after the server answers)."""
    query = (
        "SELECT string_agg(table_name, ',' ORDER BY table_name) FROM information_schema.tables "
        f"WHERE table_schema = '{READ_SCHEMA}' AND table_name LIKE '%tracking'"
    )
    deadline = time.monotonic() + timeout
    while True:
        names = (scalar(url, query) or "").split(",")
        found = [name for name in names if name]
        if len(found) >= expected or time.monotonic() > deadline:
            return found
        time.sleep(0.5)


@dataclass
class Track:
    """The lags of one projection, and the index of the first observed head it has not reached yet."""

    lags: list[float] = field(default_factory=list)
    next_head: int = 0
    position: int = 0


class LagSampler(Poller):
    name = "lag sampler"

    def __init__(self, url: str, tables: list[str], interval: float = 0.005) -> None:
        super().__init__(url, interval)
        self.baseline: int | None = None  # the head when sampling started: not measured
        self.heads: list[tuple[int, float]] = []  # (notification id, first seen), ascending
        self.tracks = {table.removesuffix("_tracking"): Track() for table in tables}
        self.samples = 0
        self._query = SQL("SELECT (SELECT max(notification_id) FROM {})").format(EVENTS_TABLE)
        for table in tables:
            self._query += SQL(", (SELECT max(notification_id) FROM {} WHERE application_name = {})").format(
                Identifier(READ_SCHEMA, table), Literal(APPLICATION)
            )

    def caught_up(self) -> bool:
        head = self.heads[-1][0] if self.heads else (self.baseline or 0)
        return all(track.position >= head for track in self.tracks.values())

    def wait_caught_up(self, quiet: float = 1.0, timeout: float = 120) -> bool:
        """Waits until no new event has been seen for `quiet` seconds (requests still running when the load
        generator stopped have finished) and every projection has reached the head; False on time-out."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            last_seen = self.heads[-1][1] if self.heads else 0.0
            if self.samples and time.monotonic() - last_seen >= quiet and self.caught_up():
                return True
            time.sleep(0.05)
        return False

    def lags_ms(self) -> dict[str, list[float]]:
        return {name: [lag * 1000 for lag in track.lags] for name, track in self.tracks.items()}

    def sample(self, conn: psycopg.Connection[Any]) -> None:
        sent = time.monotonic()
        row = conn.execute(self._query).fetchone()
        now = (sent + time.monotonic()) / 2  # the snapshot was taken between the two
        self._observe(now, row[0] or 0, [position or 0 for position in row[1:]])

    def _observe(self, now: float, head: int, positions: list[int]) -> None:
        self.samples += 1
        if self.baseline is None:
            self.baseline = head
        elif head > (self.heads[-1][0] if self.heads else self.baseline):
            self.heads.append((head, now))
        for track, position in zip(self.tracks.values(), positions, strict=True):
            track.position = position
            while track.next_head < len(self.heads) and self.heads[track.next_head][0] <= position:
                track.lags.append(now - self.heads[track.next_head][1])
                track.next_head += 1


def percentile(values: list[float], p: float) -> float:
    """The nearest-rank percentile (0 for no values)."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = min(max(1, math.ceil(p / 100 * len(ordered))), len(ordered))
    return ordered[rank - 1]
