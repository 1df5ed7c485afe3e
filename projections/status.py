"""Whether each projection keeps up with the event log: for `/health`, `projections status`, `audit verify`.

The runner records a projection's failure in `read.projection_status` (one row per failing projection: the
error, the notification id it failed on, when, and how many times in a row) and deletes the row once the
projection applies events again. A projection is *stalled* when it has a recorded failure, or when the oldest
event it has not applied is older than the stall threshold (`BROKER_LEDGER_PROJECTION_STALL_SECONDS`, 30 by
default, read at start by the composition root and handed to `ProjectionState.stalled`). The age of that
event, not the number of events behind, says whether it keeps up: a projection a few events behind a busy
log is fine, one that has not applied an event for a minute is not, and an idle log is never behind.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import psycopg
from psycopg import sql
from psycopg.rows import tuple_row

from projections.base.postgres import READ_SCHEMA

STALL_SECONDS_ENV = "BROKER_LEDGER_PROJECTION_STALL_SECONDS"  # the stall threshold (interface.environment)
DEFAULT_STALL_SECONDS = 30.0
TABLE = sql.Identifier(READ_SCHEMA, "projection_status")
CREATE_LOCK = 0x50524F4A_53544154  # serialises creating the table (concurrent IF NOT EXISTS can collide)
ERROR_LENGTH = 2000  # characters of an error message kept
EventTime = Callable[[int], datetime | None]  # the time of the first event after a position (None: none)


@dataclass(frozen=True)
class Failure:
    error: str
    notification_id: int | None  # the event it failed on; None when the failure was not an event's
    failed_at: datetime  # the latest failure
    failures: int  # in a row
    since: datetime  # the first of them


@dataclass(frozen=True)
class ProjectionState:
    name: str
    position: int  # the last notification id it applied
    head: int  # the event log's last notification id
    behind_seconds: float  # age of the oldest event it has not applied; 0 when it has applied all
    failure: Failure | None

    def stalled(self, threshold: float) -> bool:
        return self.failure is not None or self.behind_seconds > threshold

    def describe(self) -> str:
        text = f"{self.name} at position {self.position} of {self.head}"
        if self.position < self.head:
            text += f", its oldest unapplied event {self.behind_seconds:.0f} s old"
        if self.failure is not None:
            failure = self.failure
            on = f" on notification {failure.notification_id}" if failure.notification_id else ""
            text += (
                f"; failed {failure.failures} time(s) in a row{on} since {failure.since.isoformat()}, "
                f"last at {failure.failed_at.isoformat()}: {failure.error}"
            )
        return text


def _create_table(conn: psycopg.Connection[Any]) -> None:
    conn.execute("SELECT pg_advisory_xact_lock(%s)", (CREATE_LOCK,))
    conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(READ_SCHEMA)))
    conn.execute(
        sql.SQL(
            "CREATE TABLE IF NOT EXISTS {} (projection text PRIMARY KEY, failures integer NOT NULL, "
            "error text NOT NULL, notification_id bigint, failed_at timestamptz NOT NULL, "
            "since timestamptz NOT NULL)"
        ).format(TABLE)
    )


def create_table(url: str) -> None:
    """Creates the table if it is not there yet (the analyst role's grants must find it to exclude it)."""
    with psycopg.connect(url, autocommit=True, connect_timeout=5) as conn, conn.transaction():
        _create_table(conn)


def record_failure(url: str, name: str, error: str, notification_id: int | None) -> None:
    """Counts one more failure in a row of projection `name`, with its error and event."""
    with psycopg.connect(url, autocommit=True, connect_timeout=5) as conn, conn.transaction():
        _create_table(conn)
        # now(): one instant for both columns (clock_timestamp() twice put failed_at just before since)
        conn.execute(
            sql.SQL(
                "INSERT INTO {0} AS s VALUES (%s, 1, %s, %s, now(), now()) "
                "ON CONFLICT (projection) DO UPDATE SET failures = s.failures + 1, error = excluded.error, "
                "notification_id = excluded.notification_id, failed_at = excluded.failed_at"
            ).format(TABLE),
            (name, error[:ERROR_LENGTH], notification_id),
        )


def clear_failure(conn: psycopg.Connection[Any], name: str) -> None:
    """Forgets projection `name`'s failures: it applies events again. On the projection's own connection
    (autocommit, outside its pages): no connection of its own, so a runner's start costs no extra one."""
    with conn.transaction():
        _create_table(conn)
        conn.execute(sql.SQL("DELETE FROM {} WHERE projection = %s").format(TABLE), (name,))


def _exists(conn: psycopg.Connection[Any], table: sql.Identifier) -> bool:
    """Whether `table` exists (on any connection, whatever its row factory)."""
    with conn.cursor(row_factory=tuple_row) as cursor:
        found = cursor.execute("SELECT to_regclass(%s)", [table.as_string(conn)]).fetchone()
    return found is not None and found[0] is not None


def has_failure(conn: psycopg.Connection[Any], name: str) -> bool:
    """Whether projection `name` has a recorded failure (on any connection, whatever its row factory)."""
    if not _exists(conn, TABLE):
        return False
    with conn.cursor(row_factory=tuple_row) as cursor:
        select = sql.SQL("SELECT 1 FROM {} WHERE projection = %s").format(TABLE)
        return cursor.execute(select, (name,)).fetchone() is not None


def failures(conn: psycopg.Connection[Any]) -> dict[str, Failure]:
    """The recorded failures, by projection name."""
    if not _exists(conn, TABLE):
        return {}
    rows = conn.execute(
        sql.SQL("SELECT projection, error, notification_id, failed_at, failures, since FROM {}").format(TABLE)
    ).fetchall()
    return {row[0]: Failure(*row[1:]) for row in rows}


def positions(conn: psycopg.Connection[Any], names: Iterable[str]) -> dict[str, int]:
    """Each projection's position (0 while its tracking table does not exist yet)."""
    found = {}
    for name in names:
        table = sql.Identifier(READ_SCHEMA, f"{name.lower()}_tracking")
        if not _exists(conn, table):
            found[name] = 0
            continue
        statement = sql.SQL("SELECT coalesce(max(notification_id), 0) FROM {} WHERE application_name = %s")
        found[name] = conn.execute(statement.format(table), ("Ledger",)).fetchone()[0]
    return found


def event_time(app: Any) -> EventTime:
    """The time of the first event after a position, read from the log `app` (a `LedgerLog` or the
    `Ledger`); None when there is none, or when it cannot be decoded (a projection then fails on it,
    which its recorded failure says)."""

    def after(position: int) -> datetime | None:
        notifications = app.notifications(position + 1, 1)
        if not notifications:
            return None
        try:
            return app.decoder(notifications[0]).timestamp
        except Exception:
            return None

    return after


def states(
    conn: psycopg.Connection[Any],
    names: Iterable[str],
    head: int,
    time_after: EventTime,
    now: datetime | None = None,
) -> list[ProjectionState]:
    """Where each projection is, how far behind the log's `head` in time, and its recorded failure."""
    now = now or datetime.now(UTC)
    recorded = failures(conn)
    times: dict[int, datetime | None] = {}  # projections at one position share the lookup
    found = []
    for name, position in positions(conn, names).items():
        behind = 0.0
        if position < head:
            if position not in times:
                times[position] = time_after(position)
            oldest = times[position]
            behind = max((now - oldest).total_seconds(), 0.0) if oldest is not None else 0.0
        found.append(ProjectionState(name, position, head, behind, recorded.get(name)))
    return found
