"""Schema creation at start: any number of workers and replicas may start at once on an empty database.

eventsourcing's recorders create their composite type (`CREATE TYPE ... stored_event_uuid`, which has no
IF NOT EXISTS) in a transaction of its own and ignore DuplicateObject, then their tables and indexes in
another. Two processes starting together on an empty database both find the type missing and one dies on
the catalog's unique index (UniqueViolation on pg_type, "type ... already exists"), which is not ignored; and
every later start writes an ERROR line to PostgreSQL's log for the CREATE TYPE that fails because the type
exists. Here every recorder creates its types, tables and indexes in ONE transaction under the advisory
lock `SCHEMA_LOCK` (taken on the connection that runs the DDL, just before its transaction), and creates a
type only if `to_regtype` does not find it; `ensure_schema` takes the same lock and looks for the schema
before creating it.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from eventsourcing.postgres import PostgresAggregateRecorder, PostgresApplicationRecorder
from psycopg import Connection, Cursor
from psycopg.sql import Composed

SCHEMA_LOCK = 0x424C_5343_4845_4D41  # "BLSCHEMA": serialises schema creation across processes and hosts


@contextmanager
def schema_creation(conn: Connection[Any]) -> Iterator[None]:
    """Holds the database-wide lock on schema creation on `conn` (in autocommit mode) while inside: a session
    lock, taken before the transaction that creates anything begins. A lock taken inside that transaction
    would not do: a backend reads the catalog changes others committed (its caches' invalidations) when a
    transaction starts, not when an advisory lock is granted, so it could still miss a type or table created
    while it waited, and create it again."""
    conn.execute("SELECT pg_advisory_lock(%s)", (SCHEMA_LOCK,))
    try:
        yield
    finally:
        conn.execute("SELECT pg_advisory_unlock(%s)", (SCHEMA_LOCK,))


class SerialSchemaCreation:
    """Mixin for eventsourcing's PostgreSQL aggregate recorders (put it first among the bases)."""

    datastore: Any
    sql_create_statements: list[Composed]
    stored_event_type_name: str

    def create_table(self) -> None:
        with (
            self.datastore.get_connection() as conn,
            schema_creation(conn),
            conn.transaction(),
            conn.cursor() as curs,
        ):
            for statement in self.sql_create_statements:
                if "CREATE TYPE" in statement.as_string() and not self._type_exists(curs):
                    curs.execute(statement, prepare=False)
            self._create_table(curs)  # type: ignore[attr-defined]  # the recorder's: all but CREATE TYPE
        self.datastore.register_type_adapters()

    def _type_exists(self, curs: Cursor[Any]) -> bool:
        name = f'"{self.datastore.schema}"."{self.stored_event_type_name}"'
        row = curs.execute("SELECT to_regtype(%s) IS NOT NULL AS found", (name,)).fetchone()
        return bool(row and row["found"])


class SerialAggregateRecorder(SerialSchemaCreation, PostgresAggregateRecorder):
    """eventsourcing's aggregate recorder (the snapshots), creating its schema under `SCHEMA_LOCK`."""


class SerialApplicationRecorder(SerialSchemaCreation, PostgresApplicationRecorder):
    """eventsourcing's application recorder (BROKER_LEDGER_GROUP_COMMIT=off), creating its schema under
    `SCHEMA_LOCK`."""
