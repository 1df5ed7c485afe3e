"""The analysts' watch: an analyst's limits hold whatever the analyst sets in its own session.

`broker-ledger analyst create-role` gives each analyst role session defaults (`statement_timeout`,
`idle_in_transaction_session_timeout`), but any session may change its own settings: `SET statement_timeout
= 0` is accepted. So the command also records each role, by name and oid, with its limits in
`read.analyst_limits` (a table the analysts cannot read), and makes the service's role a member of it, which
lets the service see its sessions in `pg_stat_activity` and signal them (PostgreSQL lets a role signal the
sessions of the roles whose privileges it has; `pg_signal_backend` and `pg_read_all_stats` would do too).

Every projection worker (`projections.live`: every API worker's and every `projections run` runner's) looks
at the recorded roles' sessions, in every database of the server, once a `WATCH_SECONDS`, on its own
connection, and:

- cancels a statement that has run longer than its role's statement limit (`pg_cancel_backend`), and ends
  the session (`pg_terminate_backend`) when the statement is still running `TERMINATE_AFTER_SECONDS` later
  (one that does not answer a cancel);
- ends a session that has stayed idle inside a transaction longer than its role's idle limit (a cancel would
  not end its transaction nor release its locks).

Several workers may signal the same session: a second signal of a statement already cancelled does nothing.
A rebuild does not wait behind an analyst either: `end_lock_holders` ends the recorded roles' sessions that
hold a lock on tables a rebuild must empty (`projections.rebuild`). Superusers are never recorded roles.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg.rows import dict_row
from psycopg.sql import SQL, Composed, Identifier, Literal

from projections.base.postgres import READ_SCHEMA

log = logging.getLogger("broker_ledger.analysts")
LIMITS_TABLE = "analyst_limits"
WATCH_SECONDS = 1.0  # how often a worker looks at the analysts' sessions
TERMINATE_AFTER_SECONDS = 10  # a statement still running this long after its cancel: its session is ended
RETRY_SECONDS = 60.0  # a look that failed (say, the service may not signal) is tried again this much later
END_WAIT_MS = 2000  # how long `end_lock_holders` waits for each session it ends to be gone
ACTIVE = ("active", "fastpath function call")
IDLE_IN_TRANSACTION = ("idle in transaction", "idle in transaction (aborted)")

LIMITS = """CREATE TABLE IF NOT EXISTS {table} (
    role_name name PRIMARY KEY,
    role_oid oid NOT NULL,
    statement_seconds integer NOT NULL,
    idle_seconds integer NOT NULL)"""
# the client sessions of the recorded roles (by oid and name: a role dropped and created again by someone
# else is not one), in every database; state and times are NULL where the service may not see them
SESSIONS = """SELECT a.pid, r.role_name, a.state, r.statement_seconds, r.idle_seconds,
    extract(epoch FROM now() - a.query_start)::float8 AS running,
    extract(epoch FROM now() - a.state_change)::float8 AS unchanged
FROM pg_stat_activity AS a
JOIN {table} AS r ON r.role_oid = a.usesysid
JOIN pg_roles AS p ON p.oid = a.usesysid AND p.rolname = r.role_name AND NOT p.rolsuper
WHERE a.backend_type = 'client backend' AND a.pid <> pg_backend_pid()"""
LOCK_HOLDERS = " AND a.pid IN (SELECT pid FROM pg_locks WHERE granted AND relation = ANY(%s::regclass[]))"


@dataclass(frozen=True)
class Ended:
    """A session of an analyst signalled: its process id, its role, how (`cancel` or `terminate`), why."""

    pid: int
    role: str
    how: str
    why: str


def limits_table(schema: str = READ_SCHEMA) -> Composed:
    return SQL(LIMITS).format(table=Identifier(schema, LIMITS_TABLE))


def record_limits(
    role: str, statement_seconds: int, idle_seconds: int, schema: str = READ_SCHEMA
) -> list[Composed]:
    """The statements that record `role` (created already) with its limits, for the watch."""
    return [
        limits_table(schema),
        SQL(
            "INSERT INTO {table} (role_name, role_oid, statement_seconds, idle_seconds) "
            "SELECT rolname, oid, {statement}, {idle} FROM pg_roles WHERE rolname = {role} "
            "ON CONFLICT (role_name) DO UPDATE SET role_oid = EXCLUDED.role_oid, "
            "statement_seconds = EXCLUDED.statement_seconds, idle_seconds = EXCLUDED.idle_seconds"
        ).format(
            table=Identifier(schema, LIMITS_TABLE),
            statement=Literal(statement_seconds),
            idle=Literal(idle_seconds),
            role=Literal(role),
        ),
    ]


def overdue(session: dict[str, Any]) -> tuple[str, str] | None:
    """How to signal a session of an analyst (a row of SESSIONS), and why; None if it is within its limits."""
    state, limit = session["state"], session["statement_seconds"]
    if state in ACTIVE and session["running"] > limit + TERMINATE_AFTER_SECONDS:
        return (
            "terminate",
            f"a statement still running {TERMINATE_AFTER_SECONDS} s after its limit of {limit} s",
        )
    if state in ACTIVE and session["running"] > limit:
        return "cancel", f"a statement past its limit of {limit} s"
    if state in IDLE_IN_TRANSACTION and session["unchanged"] > session["idle_seconds"]:
        return "terminate", f"idle in a transaction past its limit of {session['idle_seconds']} s"
    return None


@dataclass(frozen=True)
class Look:
    """What a look at the analysts' sessions did, and the roles whose sessions the service may not see."""

    ended: list[Ended]
    unseen: list[str]


def enforce(connection: psycopg.Connection[Any], schema: str = READ_SCHEMA) -> Look:
    """Cancels or ends every session of a recorded analyst past its limits (see above)."""
    sessions = _sessions(connection, schema, "")
    ended = []
    for session in sessions:
        action = overdue(session)
        if action is not None:
            ended.append(_signal(connection, session, *action))
    return Look(ended, sorted({s["role_name"] for s in sessions if s["state"] is None}))


def end_lock_holders(
    connection: psycopg.Connection[Any], tables: Sequence[str], schema: str = READ_SCHEMA
) -> list[Ended]:
    """Ends the sessions of recorded analysts that hold a lock on any of `tables` (qualified names), and
    waits (up to END_WAIT_MS each) until they are gone, their locks with them."""
    sessions = _sessions(connection, schema, LOCK_HOLDERS, [str(table) for table in tables])
    return [
        _signal(connection, s, "terminate", "holding a lock a rebuild needs", END_WAIT_MS) for s in sessions
    ]


def _sessions(
    connection: psycopg.Connection[Any], schema: str, condition: str, *params: Any
) -> list[dict[str, Any]]:
    with connection.cursor(row_factory=dict_row) as cursor:
        table = f"{schema}.{LIMITS_TABLE}"
        present = cursor.execute("SELECT to_regclass(%s) IS NOT NULL AS present", (table,)).fetchone()
        if not (present and present["present"]):
            return []  # no analyst role recorded yet
        query = SQL(SESSIONS + condition).format(table=Identifier(schema, LIMITS_TABLE))
        return cursor.execute(query, params).fetchall()


def _signal(
    connection: psycopg.Connection[Any], session: dict[str, Any], how: str, why: str, wait_ms: int = 0
) -> Ended:
    pid, role = session["pid"], session["role_name"]
    if how == "cancel":
        connection.execute("SELECT pg_cancel_backend(%s)", (pid,))
    else:
        connection.execute("SELECT pg_terminate_backend(%s, %s)", (pid, wait_ms))
    verb = "cancelled the statement of" if how == "cancel" else "ended"
    log.warning("%s analyst %s's session (pid %d): %s", verb, role, pid, why)
    return Ended(pid, role, how, why)


class AnalystWatch:
    """A worker's watch (see above): `look` enforces the analysts' limits at most once a `every` seconds."""

    def __init__(self, schema: str = READ_SCHEMA, every: float = WATCH_SECONDS) -> None:
        self.schema = schema
        self.every = every
        self.next_look = 0.0  # time.monotonic() of the next look
        self._unseen_told = 0.0  # when it last said that it may not see some analysts' sessions

    def look(self, connection: psycopg.Connection[Any]) -> list[Ended]:
        """Enforces the limits if it is time to; a failure is logged and the look tried again later (a lost
        connection is raised, for the worker to connect again)."""
        now = time.monotonic()
        if now < self.next_look:
            return []
        self.next_look = now + self.every
        try:
            done = enforce(connection, self.schema)
        except psycopg.Error:
            if connection.broken or connection.closed:
                raise
            self.next_look = now + RETRY_SECONDS
            log.exception("the analysts' watch failed; looking again in %.0f s", RETRY_SECONDS)
            return []
        if done.unseen and now >= self._unseen_told + RETRY_SECONDS:
            self._unseen_told = now
            log.error(
                "the service's role may not see the sessions of analyst roles %s, so it cannot hold them to "
                "their limits: run `broker-ledger analyst create-role` again for each",
                ", ".join(done.unseen),
            )
        return done.ended
