"""The outcome of each `broker-ledger audit verify`, kept in `read.audit_verifications` (one row per run), so
that the console and the analysts can tell when the ledger was last proven and what was found then; and the
audit chain's head as the `AuditChain` projection last recorded it (its latest checkpoint).

A row is written by the run itself once its checks are done, whatever they found; nothing else writes the
table, and no projection rebuilds it (it is a record of runs, not derived from the event log).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import msgspec
import psycopg
from psycopg.rows import dict_row
from psycopg.sql import SQL, Identifier

from projections.audit_chain import CHECKPOINTS_TABLE
from projections.audit_sql import Check
from projections.base.postgres import READ_SCHEMA

TABLE = "audit_verifications"
CREATE = """CREATE TABLE IF NOT EXISTS {table} (
    id bigserial PRIMARY KEY,
    at timestamptz NOT NULL,
    passed boolean NOT NULL,
    checks jsonb NOT NULL
)"""


@dataclass(frozen=True)
class CheckOutcome:
    name: str
    status: str
    details: list[str]


@dataclass(frozen=True)
class Verification:
    """One run of `audit verify`: when it finished, whether every check passed, and each check's outcome."""

    at: datetime
    passed: bool
    checks: list[CheckOutcome]


def record_verification(url: str, at: datetime, checks: list[Check]) -> None:
    """Keeps the outcome of a run that finished at `at`."""
    table = Identifier(READ_SCHEMA, TABLE)
    outcomes = [{"name": check.name, "status": check.status, "details": check.details} for check in checks]
    with psycopg.connect(url, autocommit=True, connect_timeout=5) as conn, conn.transaction():
        conn.execute(SQL("CREATE SCHEMA IF NOT EXISTS {}").format(Identifier(READ_SCHEMA)))
        conn.execute(SQL(CREATE).format(table=table))
        conn.execute(
            SQL("INSERT INTO {} (at, passed, checks) VALUES (%s, %s, %s::jsonb)").format(table),
            (at, not any(check.failed for check in checks), msgspec.json.encode(outcomes).decode()),
        )


def last_verification(conn: psycopg.Connection) -> Verification | None:
    """The latest run's outcome; None when `audit verify` never ran on this database."""
    row = _latest(conn, "SELECT at, passed, checks FROM {} ORDER BY id DESC LIMIT 1", TABLE)
    if row is None:
        return None
    return Verification(row["at"], row["passed"], [CheckOutcome(**check) for check in row["checks"]])


@dataclass(frozen=True)
class ChainHead:
    """The audit chain's latest link: the event's position, the link's number, its hash and its time."""

    notification_id: int
    seq: int
    chain_hash: str
    at: datetime


def chain_head_of(conn: psycopg.Connection) -> ChainHead | None:
    """The chain's head as its latest checkpoint records it; None before the chain has a link."""
    latest = "SELECT notification_id, seq, chain_hash, at FROM {} ORDER BY seq DESC LIMIT 1"
    row = _latest(conn, latest, CHECKPOINTS_TABLE)
    return ChainHead(**row) if row else None


def _latest(conn: psycopg.Connection, query: str, table: str) -> dict[str, Any] | None:
    """The one row `query` reads from the read schema's `table`; None without one, or without the table."""
    try:
        with conn.transaction():
            found = conn.cursor(row_factory=dict_row).execute(
                SQL(query).format(Identifier(READ_SCHEMA, table))
            )
            return found.fetchone()
    except psycopg.errors.UndefinedTable:
        return None
