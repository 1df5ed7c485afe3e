"""The PostgreSQL side of every projection: a tracking recorder that owns some read-model tables.

A projection changes its tables and records the position of the event it processed in ONE database
transaction (`recording`), so a crash never applies an event twice or skips one: after a crash the runner
resumes after the last recorded position, and a second apply of the same position is refused by the
single-row tracking table (its position only moves forward) and rolls back.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from eventsourcing.persistence import Tracking
from eventsourcing.postgres import PostgresDatastore, PostgresTrackingRecorder
from psycopg import Cursor
from psycopg.rows import DictRow
from psycopg.sql import SQL, Composed, Identifier

READ_SCHEMA = "read"


class ReadModel(PostgresTrackingRecorder):
    """Base of the projections' views. Subclasses list their tables and the statements creating them."""

    tables: tuple[str, ...] = ()

    def __init__(self, datastore: PostgresDatastore, *, tracking_table_name: str, **kwargs: Any) -> None:
        super().__init__(datastore, tracking_table_name=tracking_table_name, **kwargs)
        self.sql_create_statements.extend(self.create_statements())

    def create_statements(self) -> list[Composed]:
        """CREATE TABLE IF NOT EXISTS ... for each table; use `self.table(name)` for qualified names."""
        return []

    def table(self, name: str) -> Identifier:
        return Identifier(self.datastore.schema, name)

    @contextmanager
    def recording(self, tracking: Tracking) -> Iterator[Cursor[DictRow]]:
        """A cursor whose changes commit together with `tracking`, or not at all."""
        with self.datastore.transaction(commit=True) as curs:
            yield curs
            self._insert_tracking(curs, tracking)

    def skip(self, tracking: Tracking) -> None:
        """Records the position of an event this projection has nothing to do with."""
        self.insert_tracking(tracking)

    def reset(self) -> None:
        """Empties the tables and forgets the position: the next run rebuilds from the first event."""
        with self.datastore.transaction(commit=True) as curs:
            for name in self.tables:
                curs.execute(SQL("TRUNCATE {}").format(self.table(name)))
            curs.execute(
                SQL("DELETE FROM {}").format(Identifier(self.datastore.schema, self.tracking_table_name))
            )

    def position(self, application_name: str = "Ledger") -> int:
        return self.max_tracking_id(application_name) or 0
