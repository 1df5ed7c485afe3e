"""What the audit checks share: their result, consistent snapshots of the database, table checksums."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import psycopg
from psycopg import IsolationLevel
from psycopg.rows import DictRow, dict_row
from psycopg.sql import SQL, Composable, Identifier

from application.store.database import OPTIONS_KEY, PROJECTION_TIMEOUTS

Connection = psycopg.Connection[DictRow]

OK = "OK"
FAILED = "FAILED"
SKIPPED = "SKIPPED"


@dataclass
class Check:
    """One check of `audit verify`: its name, OK / FAILED / SKIPPED, and what it found."""

    name: str
    status: str
    details: list[str] = field(default_factory=list)

    @property
    def failed(self) -> bool:
        return self.status == FAILED


@dataclass(frozen=True)
class TableChecksum:
    """A table's row count and a digest of its rows that does not depend on their physical order."""

    rows: int
    digest: str

    def __str__(self) -> str:
        return f"{self.rows} rows, md5 {self.digest}"


def small_pool(env: dict[str, str]) -> dict[str, str]:
    """`env` with a pool of one connection (and a few more on demand): the checks run one query at a time,
    and a busy server should not lose connections to an audit. Its statements read the whole log, so they
    get the projections' timeouts, not a request's."""
    return {
        **env,
        "POSTGRES_POOL_SIZE": "1",
        "POSTGRES_MAX_OVERFLOW": "3",
        OPTIONS_KEY: PROJECTION_TIMEOUTS.options(),
    }


@contextmanager
def snapshot(url: str) -> Iterator[Connection]:
    """A read-only REPEATABLE READ transaction: every query inside sees the same committed state."""
    with psycopg.connect(url, row_factory=dict_row) as conn:
        conn.isolation_level = IsolationLevel.REPEATABLE_READ
        conn.read_only = True
        with conn.transaction():
            yield conn


def table_exists(conn: Connection, schema: str, table: str) -> bool:
    """Whether `schema.table` exists yet (whatever the connection's row factory)."""
    found = conn.cursor(row_factory=dict_row).execute(
        "SELECT to_regclass(%s) IS NOT NULL AS found", (f'"{schema}"."{table}"',)
    )
    row = found.fetchone()
    return bool(row and row["found"])


def columns(conn: Connection, schema: str, table: str) -> list[str]:
    rows = conn.execute(
        "SELECT column_name FROM information_schema.columns WHERE table_schema = %s AND table_name = %s "
        "ORDER BY ordinal_position",
        (schema, table),
    ).fetchall()
    return [row["column_name"] for row in rows]


def table_checksum(conn: Connection, schema: str, table: str) -> TableChecksum:
    """md5 over the sorted md5s of the rows' text forms: equal tables (same columns) give equal sums."""
    row = conn.execute(
        SQL(
            "SELECT count(*) AS rows, md5(coalesce(string_agg(h, '' ORDER BY h), '')) AS digest "
            "FROM (SELECT md5(t::text) AS h FROM {} AS t) AS hashed"
        ).format(Identifier(schema, table))
    ).fetchone()
    assert row is not None
    return TableChecksum(row["rows"], row["digest"])


def rows_only_in(conn: Connection, table: Composable, other: Composable, limit: int = 3) -> list[str]:
    """Up to `limit` rows (as text, so that any column type compares) of `table` that `other` lacks."""
    rows = conn.execute(
        SQL(
            "SELECT r FROM (SELECT t::text AS r FROM {} AS t EXCEPT ALL SELECT o::text FROM {} AS o) AS d "
            "ORDER BY r LIMIT %s"
        ).format(table, other),
        (limit,),
    ).fetchall()
    return [row["r"] for row in rows]


def tracking_position(conn: Connection, schema: str, tracking_table: str, application: str) -> int:
    """The position recorded in `tracking_table`; 0 when the table does not exist (looked up first, so that a
    projection that never ran costs no failed query, nor an ERROR line in PostgreSQL's log)."""
    if not table_exists(conn, schema, tracking_table):
        return 0
    row = conn.execute(
        SQL("SELECT max(notification_id) AS position FROM {} WHERE application_name = %s").format(
            Identifier(schema, tracking_table)
        ),
        (application,),
    ).fetchone()
    return int(row["position"] or 0) if row else 0


def drop_schema(url: str, schema: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(Identifier(schema)))
