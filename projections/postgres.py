"""The PostgreSQL side of every projection: a tracking recorder that owns some read-model tables.

A projection changes its tables and records the position of the event it processed in ONE database
transaction (`recording`), so a crash never applies an event twice or skips one: after a crash the runner
resumes after the last recorded position, and a second apply of the same position is refused by the
single-row tracking table (its position only moves forward) and rolls back.

Inside `batch()`, the events processed share one transaction, sent in pipeline mode, and only the position
of the last is recorded, at its end: a page of the event log costs one commit instead of one per event, and
still applies completely or not at all.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from eventsourcing.persistence import Tracking
from eventsourcing.postgres import PostgresDatastore, PostgresTrackingRecorder
from psycopg import Cursor
from psycopg.rows import DictRow
from psycopg.sql import SQL, Composed, Identifier

READ_SCHEMA = "read"


@dataclass
class _Batch:
    cursor: Cursor[DictRow]
    tracking: Tracking | None = None


class ReadModel(PostgresTrackingRecorder):
    """Base of the projections' views. Subclasses list their tables and the statements creating them."""

    tables: tuple[str, ...] = ()

    def __init__(self, datastore: PostgresDatastore, *, tracking_table_name: str, **kwargs: Any) -> None:
        super().__init__(datastore, tracking_table_name=tracking_table_name, **kwargs)
        self.sql_create_statements.extend(self.create_statements())
        self._batches = threading.local()

    def create_statements(self) -> list[Composed]:
        """CREATE TABLE IF NOT EXISTS ... for each table; use `self.table(name)` for qualified names."""
        return []

    def table(self, name: str) -> Identifier:
        return Identifier(self.datastore.schema, name)

    @contextmanager
    def batch(self) -> Iterator[None]:
        """Events processed inside (in this thread) commit together, with the last one's position."""
        with (
            self.datastore.get_connection() as conn,
            conn.pipeline(),
            conn.transaction(),
            conn.cursor() as curs,
        ):
            batch = _Batch(curs)
            self._batches.current = batch
            try:
                yield
                if batch.tracking is not None:
                    self._insert_tracking(curs, batch.tracking)
            finally:
                self._batches.current = None

    @contextmanager
    def recording(self, tracking: Tracking) -> Iterator[Cursor[DictRow]]:
        """A cursor whose changes commit together with `tracking`, or not at all."""
        batch: _Batch | None = getattr(self._batches, "current", None)
        if batch is not None:
            yield batch.cursor
            batch.tracking = tracking
            return
        with self.datastore.transaction(commit=True) as curs:
            yield curs
            self._insert_tracking(curs, tracking)

    @contextmanager
    def reading(self) -> Iterator[Cursor[DictRow]]:
        """A cursor for a projection's own reads: the batch's (which sees what the batch wrote so far), or
        outside a batch one of its own."""
        batch: _Batch | None = getattr(self._batches, "current", None)
        if batch is not None:
            yield batch.cursor
            return
        with self.datastore.transaction(commit=False) as curs:
            yield curs

    def skip(self, tracking: Tracking) -> None:
        """Records the position of an event this projection has nothing to do with."""
        batch: _Batch | None = getattr(self._batches, "current", None)
        if batch is not None:
            batch.tracking = tracking
            return
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
