"""Check (c) of `audit verify`: the event log as stored, hashed again, against the audit chain.

One REPEATABLE READ snapshot walks `ledger.ledger_events` and `read.audit_chain` side by side in
notification order. Each chained event is hashed again from its stored row:
- a link whose event is gone: the event was deleted;
- an event hash that differs: the stored row (state, topic, aggregate, version) was altered;
- an event with no link at or before the chain's head: it was inserted after the chain passed its place;
- a link whose chain hash does not follow from the previous link and the intact event: the chain was edited;
- a checkpoint (or a hash the auditor kept, `expected`) that differs from the chain recomputed from the log
  as it is now: something before it changed.
A gap in notification ids alone proves nothing (a rolled-back insert consumes its ids), which is why
deletions are found through the chain's links. Events after the head are not chained yet (the projection
is behind); they are counted, not judged.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from psycopg.sql import SQL, Identifier

from projections.audit_chain import (
    CHAIN_TABLE,
    CHECKPOINTS_TABLE,
    EVENTS_TABLE,
    GENESIS,
    event_hash,
    link,
    stored_canonical,
)
from projections.audit_sql import FAILED, OK, Check, Connection, snapshot, table_exists
from projections.base.postgres import READ_SCHEMA

MAX_LISTED = 10
Row = dict[str, Any]


def named(row: Row) -> str:
    return (
        f"notification {row['notification_id']} ({row['topic']} of aggregate {row['originator_id']} "
        f"version {row['originator_version']})"
    )


class ChainWalk:
    """Recomputes the chain over the log while walking beside the recorded one; collects what differs."""

    def __init__(self, head: int, checkpoints: dict[int, str], expected: dict[int, str]) -> None:
        self.head = head
        self.checkpoints = checkpoints
        self.expected = expected
        self.recomputed = GENESIS  # the chain over the log as it is now
        self.recorded = GENESIS  # the chain hash of the previous link, as recorded
        self.seq = 0
        self.linked = 0
        self.unchained = 0
        self.problems: list[str] = []

    def step(self, n: int, event: Row | None, entry: Row | None) -> None:
        if entry is None and n > self.head:
            self.unchained += 1
            return
        canonical = None
        if event is not None:
            canonical = stored_canonical(event)
            self.recomputed = link(self.recomputed, canonical)
        if entry is None:
            assert event is not None
            self.problems.append(f"{named(event)}: in the log but not in the chain (inserted)")
        else:
            self._compare(entry, event, canonical)
        self._check_kept_hashes(n)

    def _compare(self, entry: Row, event: Row | None, canonical: bytes | None) -> None:
        self.seq += 1
        self.linked += 1
        if entry["seq"] != self.seq:
            self.problems.append(
                f"links {self.seq} to {entry['seq'] - 1} of the chain are missing before {named(entry)}"
            )
            self.seq = entry["seq"]
        if event is None or canonical is None:
            self.problems.append(f"{named(entry)}: chained, but deleted from the log")
        elif event_hash(canonical) != entry["event_hash"]:
            now = "" if named(event) == named(entry) else f"; the row now reads {named(event)}"
            self.problems.append(f"{named(entry)}: altered in the log after it was chained{now}")
        elif link(self.recorded, canonical) != entry["chain_hash"]:
            self.problems.append(f"{named(entry)}: its chain hash does not follow from the previous link")
        self.recorded = entry["chain_hash"]

    def _check_kept_hashes(self, n: int) -> None:
        for kind, kept in (("checkpoint", self.checkpoints), ("expected hash", self.expected)):
            if n in kept and kept.pop(n) != self.recomputed:
                self.problems.append(
                    f"{kind} at notification {n} differs from the chain recomputed from the log "
                    f"({self.recomputed})"
                )

    def finish(self) -> None:
        for kind, kept in (("checkpoint", self.checkpoints), ("expected hash", self.expected)):
            for n in sorted(kept):
                self.problems.append(f"{kind} at notification {n} names no event of the log")


def merged(events: Iterator[Row], entries: Iterator[Row]) -> Iterator[tuple[int, Row | None, Row | None]]:
    """(notification id, event or None, chain link or None), in notification order."""
    event, entry = next(events, None), next(entries, None)
    while event is not None or entry is not None:
        if entry is None or (event is not None and event["notification_id"] < entry["notification_id"]):
            assert event is not None
            yield event["notification_id"], event, None
            event = next(events, None)
        elif event is None or entry["notification_id"] < event["notification_id"]:
            yield entry["notification_id"], None, entry
            entry = next(entries, None)
        else:
            yield event["notification_id"], event, entry
            event, entry = next(events, None), next(entries, None)


def _stream(conn: Connection, name: str, query: SQL, *args: Any) -> Iterator[Row]:
    with conn.cursor(name=name) as cursor:
        cursor.itersize = 2000
        cursor.execute(query.format(*args))
        yield from cursor


def check_chain(url: str, expected: Sequence[tuple[int, str]] = ()) -> Check:
    """Check (c): see the module's docstring. `expected`: (notification id, chain hash) kept elsewhere."""
    name = "audit chain"
    with snapshot(url) as conn:
        if not table_exists(conn, READ_SCHEMA, CHAIN_TABLE):
            return Check(
                name, FAILED, [f"{READ_SCHEMA}.{CHAIN_TABLE} is missing: run the AuditChain projection"]
            )
        chain, checkpoints = Identifier(READ_SCHEMA, CHAIN_TABLE), Identifier(READ_SCHEMA, CHECKPOINTS_TABLE)
        head = conn.execute(SQL("SELECT max(notification_id) AS head FROM {}").format(chain)).fetchone()
        kept = conn.execute(SQL("SELECT notification_id, chain_hash FROM {}").format(checkpoints)).fetchall()
        walk = ChainWalk(
            (head or {}).get("head") or 0,
            {row["notification_id"]: row["chain_hash"] for row in kept},
            dict(expected),
        )
        events = _stream(
            conn,
            "audit_events",
            SQL(
                "SELECT notification_id, originator_id, originator_version, topic, state FROM {} "
                "ORDER BY notification_id"
            ),
            EVENTS_TABLE,
        )
        entries = _stream(conn, "audit_links", SQL("SELECT * FROM {} ORDER BY notification_id"), chain)
        for n, event, entry in merged(events, entries):
            walk.step(n, event, entry)
        walk.finish()
    return _report(name, walk, len(kept))


def _report(name: str, walk: ChainWalk, checkpoints: int) -> Check:
    if walk.problems:
        listed = walk.problems[:MAX_LISTED]
        more = len(walk.problems) - len(listed)
        return Check(
            name,
            FAILED,
            [f"first mismatch: {listed[0]}", *listed[1:], *([f"... and {more} more"] if more else [])],
        )
    if walk.linked == 0 and walk.unchained:
        return Check(name, FAILED, [f"the chain is empty but the log has {walk.unchained} events"])
    details = [
        f"{walk.linked} events re-hashed, all equal to their links; {checkpoints} checkpoints match",
        f"chain head: notification {walk.head}, chain hash {walk.recomputed}",
    ]
    if walk.unchained:
        details.append(f"{walk.unchained} events after notification {walk.head} are not chained yet")
    return Check(name, OK, details)
