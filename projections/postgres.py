"""The PostgreSQL side of every projection: a tracking recorder that owns some read-model tables.

A projection changes its tables and records the position of the event it processed in ONE database
transaction (`recording`), so a crash never applies an event twice or skips one: after a crash the runner
resumes after the last recorded position, and a second apply of the same position is refused by the
single-row tracking table (its position only moves forward) and rolls back.

Inside `batch()`, the events processed share one transaction, sent in pipeline mode, and only the position
of the last is recorded, at its end: a page of the event log costs one commit instead of one per event, and
still applies completely or not at all. A read inside the pipeline waits for the database (a round trip), so
a batch also knows the page's stored events (`notification`) and keeps, for the batch only, rows that a
projection reads and writes again and again (`page_rows`): read once for the whole page, then kept up to
date by the projection's own writes, and forgotten with the batch (committed or rolled back).
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Hashable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

from eventsourcing.persistence import Notification, Tracking
from eventsourcing.postgres import PostgresDatastore, PostgresRecorder, PostgresTrackingRecorder
from psycopg import Cursor
from psycopg.abc import Query
from psycopg.rows import DictRow, dict_row
from psycopg.sql import SQL, Composed, Identifier

READ_SCHEMA = "read"
CREATE_INDEX = re.compile(r'\s*CREATE\s+(?:UNIQUE\s+)?INDEX\s+IF\s+NOT\s+EXISTS\s+"?([^"\s]+)"?\s+ON\s', re.I)
Rows = dict[UUID, Any]
SelectRows = Callable[[Cursor[DictRow], list[UUID]], Rows]


@dataclass
class _Batch:
    cursor: Cursor[DictRow]
    notifications: dict[int, Notification] = field(default_factory=dict)
    tracking: Tracking | None = None
    rows: dict[str, Rows] = field(default_factory=dict)  # by name: see `ReadModel.page_rows`
    selected: dict[str, set[UUID]] = field(default_factory=dict)  # the ids each of `rows` was selected for
    kept: dict[str, Any] = field(default_factory=dict)  # see `ReadModel.kept`
    finishing: dict[str, Callable[[Cursor[DictRow]], None] | None] = field(default_factory=dict)

    def originator_ids(self) -> list[UUID]:
        return list(dict.fromkeys(n.originator_id for n in self.notifications.values()))


def index_created_by(statement: Composed | SQL) -> str | None:
    """The name of the index a `CREATE [UNIQUE] INDEX IF NOT EXISTS name ON ...` statement creates."""
    found = CREATE_INDEX.match(statement.as_string())
    return found.group(1) if found else None


def columns(rows: Sequence[tuple[Any, ...]]) -> list[list[Any]]:
    """Rows as one list per column: the arrays of an `INSERT ... SELECT * FROM unnest(...)`."""
    return [list(column) for column in zip(*rows, strict=True)]


class ReadModel(PostgresTrackingRecorder):
    """Base of the projections' views. Subclasses list their tables and the statements creating them."""

    tables: tuple[str, ...] = ()

    def __init__(self, datastore: PostgresDatastore, *, tracking_table_name: str, **kwargs: Any) -> None:
        super().__init__(datastore, tracking_table_name=tracking_table_name, **kwargs)
        self.sql_create_statements.extend(self.create_statements())
        self._batches = threading.local()
        self._statements: dict[tuple[Any, ...], SQL] = {}

    def create_statements(self) -> list[Composed]:
        """CREATE TABLE IF NOT EXISTS ... for each table; use `self.table(name)` for qualified names."""
        return []

    def create_table(self) -> None:
        """eventsourcing's, which first reads the tracking table to learn whether it exists and takes a failed
        query for no: here `to_regclass` says so, so a first start writes no ERROR to PostgreSQL's log."""
        if self._tracking_table_found():
            super().create_table()
        else:  # what the library does after its query failed: create everything, nothing to migrate
            PostgresRecorder.create_table(self)

    def _tracking_table_found(self) -> bool:
        name = Identifier(self.datastore.schema, self.tracking_table_name)
        with self.datastore.get_connection() as conn, conn.cursor(row_factory=dict_row) as curs:
            found = "SELECT to_regclass(%s) IS NOT NULL AS found"
            row = curs.execute(found, (name.as_string(conn),)).fetchone()
        return bool(row and row["found"])

    def _create_table(self, curs: Cursor[DictRow]) -> None:
        """Runs the create statements, leaving out those of indexes that exist. `CREATE INDEX IF NOT EXISTS`
        locks its table in SHARE mode before it looks for the index, and every process that opens the view
        runs these statements (an API replica starting, a projection taking over): on live tables that
        waits for their writers, and deadlocked with the callback senders' INSERT into callback_attempts
        and UPDATE of callback_outbox, which then lost the record of a delivery already made."""
        existing = {
            row["indexname"]
            for row in curs.execute(
                "SELECT indexname FROM pg_indexes WHERE schemaname = %s", (self.datastore.schema,)
            ).fetchall()
        }
        statements = self.sql_create_statements
        self.sql_create_statements = [s for s in statements if index_created_by(s) not in existing]
        try:
            super()._create_table(curs)
        finally:
            self.sql_create_statements = statements

    def table(self, name: str) -> Identifier:
        return Identifier(self.datastore.schema, name)

    def statement(self, key: tuple[Any, ...], compose: Callable[[], Composed]) -> SQL:
        """The statement `compose()` makes, composed once per `key` (a statement's shape) and view."""
        statement = self._statements.get(key)
        if statement is None:
            statement = self._statements[key] = SQL(compose().as_string())
        return statement

    @contextmanager
    def batch(self, notifications: Sequence[Notification] = ()) -> Iterator[None]:
        """Events processed inside (in this thread) commit together, with the last one's position;
        `notifications` are the stored events of the page processed (see `notification`, `page_rows`)."""
        with (
            self.datastore.get_connection() as conn,
            conn.pipeline(),
            conn.transaction(),
            conn.cursor() as curs,
        ):
            batch = _Batch(curs, {n.id: n for n in notifications})
            self._batches.current = batch
            try:
                yield
                for finish in batch.finishing.values():
                    if finish is not None:
                        finish(curs)
                if batch.tracking is not None:
                    with conn.cursor() as tracker:  # its RETURNING row is read: a cursor of its own
                        self._insert_tracking(tracker, batch.tracking)
            finally:
                self._batches.current = None

    def _batch(self) -> _Batch | None:
        return getattr(self._batches, "current", None)

    def notification(self, notification_id: int) -> Notification | None:
        """The stored event at `notification_id` if it is of the page of the batch being processed."""
        batch = self._batch()
        return batch.notifications.get(notification_id) if batch is not None else None

    def at_batch_end(
        self, curs: Cursor[DictRow], name: str, write: Callable[[Cursor[DictRow]], None] | None
    ) -> None:
        """Has `write` run at the end of the batch, before its position is recorded, unless a later call
        with the same `name` replaces it (None: nothing to write); outside a batch, it runs at once."""
        batch = self._batch()
        if batch is not None:
            batch.finishing[name] = write
        elif write is not None:
            write(curs)

    def kept(self) -> dict[str, Any] | None:
        """What a projection keeps for the batch being processed (forgotten with it), or None outside one."""
        batch = self._batch()
        return batch.kept if batch is not None else None

    def append_row(self, curs: Cursor[DictRow], name: str, statement: SQL, row: tuple[Any, ...]) -> None:
        """Inserts `row` with `statement`, which takes one array per column (`INSERT ... SELECT * FROM
        unnest(%b::type[], ...)`; psycopg sends an array in binary many times faster than as text): in a
        batch, with every row appended under `name`, in one statement at its end; outside a batch, at
        once. For rows the batch does not read back."""
        kept = self.kept()
        if kept is None:
            curs.execute(statement, columns([row]))
            return
        rows = kept.setdefault(f"appended {name}", [])
        if not rows:
            self.at_batch_end(curs, name, lambda c: c.execute(statement, columns(rows)))
        rows.append(row)

    def keep_row(
        self, curs: Cursor[DictRow], name: str, statement: SQL, key: Hashable, row: tuple[Any, ...]
    ) -> None:
        """Upserts `row`, the latest state of `key`, with `statement` (one array per column, as for
        `append_row`): in a batch, only the last row of each key, in one statement at its end; outside a
        batch, at once. The batch keeps what it reads back itself (`page_rows`)."""
        kept = self.kept()
        if kept is None:
            curs.execute(statement, columns([row]))
            return
        rows = kept.setdefault(f"kept {name}", {})

        def write(cursor: Cursor[DictRow]) -> None:
            if rows:  # (`forget_row` may have left none)
                cursor.execute(statement, columns(list(rows.values())))

        self.at_batch_end(curs, name, write)
        rows[key] = row

    def forget_row(self, curs: Cursor[DictRow], name: str, statement: SQL, key: Hashable) -> None:
        """Deletes `key`'s row with `statement` (one parameter: the key) at once, and the upsert of it that
        `keep_row` has pending, if any."""
        kept = self.kept()
        if kept is not None:
            kept.get(f"kept {name}", {}).pop(key, None)
        curs.execute(statement, (key,))

    def page_rows(self, curs: Cursor[DictRow], name: str, select: SelectRows, originator_id: UUID) -> Rows:
        """Rows (of what `select` makes of them) by aggregate id, as this transaction sees them, for
        `originator_id`. Outside a batch, `select` reads them on `curs` for `originator_id` alone. In a
        batch, it reads them once for every aggregate of the page, and they are kept for the batch under
        `name`: the caller must keep them as it changes them (what it writes is what it reads next)."""
        batch = self._batch()
        if batch is None:
            return select(curs, [originator_id])
        rows = batch.rows.setdefault(name, {})
        selected = batch.selected.setdefault(name, set())
        if originator_id not in selected:
            page = [i for i in batch.originator_ids() if i not in selected]
            ids = page if originator_id in page else [originator_id]
            rows.update({i: row for i, row in select(batch.cursor, ids).items() if i not in rows})
            selected.update(ids)
        return rows

    @staticmethod
    def fetch_all(curs: Cursor[DictRow], statement: Query, params: Any = None) -> list[DictRow]:
        """The rows of `statement`, run on a cursor of its own. In pipeline mode (a batch) a result comes
        back to the cursor that sent its statement, possibly while a later statement is sent: reading
        from a cursor that sent other statements before could return one of theirs."""
        with curs.connection.cursor() as reader:
            return reader.execute(statement, params).fetchall()

    @classmethod
    def fetch_one(cls, curs: Cursor[DictRow], statement: Query, params: Any = None) -> DictRow | None:
        rows = cls.fetch_all(curs, statement, params)
        return rows[0] if rows else None

    @contextmanager
    def recording(self, tracking: Tracking) -> Iterator[Cursor[DictRow]]:
        """A cursor whose changes commit together with `tracking`, or not at all."""
        batch = self._batch()
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
        batch = self._batch()
        if batch is not None:
            yield batch.cursor
            return
        with self.datastore.transaction(commit=False) as curs:
            yield curs

    def skip(self, tracking: Tracking) -> None:
        """Records the position of an event this projection has nothing to do with."""
        batch = self._batch()
        if batch is not None:
            batch.tracking = tracking
            return
        self.insert_tracking(tracking)

    def reset(self) -> None:
        """Empties the tables and forgets the position: the next run rebuilds from the first event."""
        with self.datastore.transaction(commit=True) as curs:
            for name in self.tables:
                curs.execute(SQL("TRUNCATE {}").format(self.table(name)))
            # eventsourcing's own row (the tracking table's migration) stays: without it, the next
            # `create_table` would migrate the table again, renaming it over the backup of the first time
            curs.execute(
                SQL("DELETE FROM {} WHERE application_name <> %s").format(
                    Identifier(self.datastore.schema, self.tracking_table_name)
                ),
                (self.table_migration_identifier,),
            )

    def position(self, application_name: str = "Ledger") -> int:
        return self.max_tracking_id(application_name) or 0
