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
date by the projection's own writes, and forgotten with the batch (committed or rolled back). `end_batch`
sends a batch's last writes and its position without waiting for the answer, which the end of the batch
reads: a rebuild ends each projection's batch of a page in turn, and PostgreSQL writes one while Python
computes the next. Rows are sent as JSON (`projections.base.json_rows`): see there why.
"""

from __future__ import annotations

import contextlib
import functools
import re
import threading
from collections.abc import Callable, Hashable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

from eventsourcing.persistence import IntegrityError, Notification, Tracking
from eventsourcing.postgres import PostgresDatastore, PostgresRecorder, PostgresTrackingRecorder
from psycopg import Cursor
from psycopg.abc import Query
from psycopg.rows import DictRow, dict_row
from psycopg.sql import SQL, Composed, Identifier

from projections.base.json_rows import as_json

READ_SCHEMA = "read"
CREATE_INDEX = re.compile(r'\s*CREATE\s+(?:UNIQUE\s+)?INDEX\s+IF\s+NOT\s+EXISTS\s+"?([^"\s]+)"?\s+ON\s', re.I)
Rows = dict[UUID, Any]
SelectRows = Callable[[Cursor[DictRow], list[UUID]], Rows]


@dataclass
class _Batch:
    cursor: Cursor[DictRow]
    page: Sequence[Notification] = ()
    tracking: Tracking | None = None
    rows: dict[str, Rows] = field(default_factory=dict)  # by name: see `ReadModel.page_rows`
    selected: dict[str, set[UUID]] = field(default_factory=dict)  # the ids each of `rows` was selected for
    kept: dict[str, Any] = field(default_factory=dict)  # see `ReadModel.kept`
    finishing: dict[str, Callable[[Cursor[DictRow]], None] | None] = field(default_factory=dict)
    ended: bool = False  # its last writes and its position are sent (see `ReadModel.end_batch`)
    tracker: Cursor[DictRow] | None = None  # the cursor that sent the position, whose answer is read last

    @functools.cached_property
    def notifications(self) -> dict[int, Notification]:
        return {n.id: n for n in self.page}

    @functools.cached_property
    def originators(self) -> dict[str, dict[UUID, None]]:
        """The aggregates of the page by their class (an event's topic without the event's own name)."""
        found: dict[str, dict[UUID, None]] = {}
        for n in self.page:
            found.setdefault(n.topic.rpartition(".")[0], {})[n.originator_id] = None
        return found

    def originator_ids(self, originator_id: UUID) -> list[UUID]:
        """The aggregates of the page of the same class as `originator_id` (none if it is not of the page)."""
        return next((list(ids) for ids in self.originators.values() if originator_id in ids), [])


def index_created_by(statement: Composed | SQL) -> str | None:
    """The name of the index a `CREATE [UNIQUE] INDEX IF NOT EXISTS name ON ...` statement creates."""
    found = CREATE_INDEX.match(statement.as_string())
    return found.group(1) if found else None


class _Recording:
    """`ReadModel.recording`: in a batch, its cursor, and the position recorded if no error left the block;
    outside a batch, a transaction of its own. A class rather than a generator, as it is entered for almost
    every event a projection applies."""

    __slots__ = ("_alone", "_batch", "_tracking", "_view")

    def __init__(self, view: ReadModel, tracking: Tracking) -> None:
        self._view = view
        self._tracking = tracking
        self._batch: _Batch | None = None
        self._alone: Any = None

    def __enter__(self) -> Cursor[DictRow]:
        self._batch = self._view._batch()
        if self._batch is not None:
            return self._batch.cursor
        self._alone = self._view._recording_alone(self._tracking)
        return self._alone.__enter__()

    def __exit__(self, error_type: type[BaseException] | None, error: Any, traceback: Any) -> bool | None:
        if self._batch is None:
            return self._alone.__exit__(error_type, error, traceback)
        if error_type is None:
            self._batch.tracking = self._tracking
        return False


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
    def batch(self, notifications: Sequence[Notification] = (), joined: bool = False) -> Iterator[None]:
        """Events processed inside (in this thread) commit together, with the last one's position;
        `notifications` are the stored events of the page processed (see `notification`, `page_rows`).
        `joined`: the view's connection is in the caller's pipeline and transaction already (several views
        lent one connection write a page in one transaction: `projections.live`), which commits the batch."""
        with self.datastore.get_connection() as conn, contextlib.ExitStack() as own:
            if not joined:
                own.enter_context(conn.pipeline())
                own.enter_context(conn.transaction())
            curs = own.enter_context(conn.cursor())
            batch = _Batch(curs, notifications)
            self._batches.current = batch
            try:
                yield
                self.end_batch()
                if batch.tracker is not None:
                    self._check_tracked(batch.tracker, batch.tracking)
                    batch.tracker.close()
            finally:
                self._batches.current = None

    def end_batch(self) -> None:
        """Sends the batch's last writes (`at_batch_end`) and its position without waiting for PostgreSQL's
        answer, which the end of the batch reads before it commits: a caller with batches of several views
        open ends each as soon as its events are processed, and PostgreSQL writes one while Python computes
        the next. Nothing may be written in the batch after it; the end of the batch calls it anyway."""
        batch = self._batch()
        if batch is None or batch.ended:
            return
        batch.ended = True
        for finish in batch.finishing.values():
            if finish is not None:
                finish(batch.cursor)
        if batch.tracking is not None:
            batch.tracker = batch.cursor.connection.cursor()  # its RETURNING row is read: a cursor of its own
            if self.datastore.single_row_tracking:
                tracking = batch.tracking
                params = {
                    "application_name": tracking.application_name,
                    "notification_id": tracking.notification_id,
                }
                batch.tracker.execute(self.insert_tracking_statement, params, prepare=True)
            else:  # eventsourcing's legacy table of one row per position: its own insert, checked at once
                self._insert_tracking(batch.tracker, batch.tracking)

    def _check_tracked(self, tracker: Cursor[DictRow], tracking: Tracking | None) -> None:
        """What eventsourcing's `_insert_tracking` checks after its insert: a single-row tracking table
        moves forward only, so a position recorded already (a page applied twice) returns no row."""
        if tracking is not None and self.datastore.single_row_tracking and tracker.fetchone() is None:
            raise IntegrityError(
                f"Failed to record tracking for {tracking.application_name} {tracking.notification_id}"
            )

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
        """Inserts `row` with `statement`, which takes rows as JSON (`INSERT INTO ...` and a `json_rows`):
        in a batch, with every row appended under `name`, in one statement at its end; outside a batch, at
        once. For rows the batch does not read back."""
        kept = self.kept()
        if kept is None:
            curs.execute(statement, as_json([row]))
            return
        rows = kept.setdefault(f"appended {name}", [])
        if not rows:
            self.at_batch_end(curs, name, lambda c: c.execute(statement, as_json(rows)))
        rows.append(row)

    def keep_row(
        self, curs: Cursor[DictRow], name: str, statement: SQL, key: Hashable, row: tuple[Any, ...]
    ) -> None:
        """Upserts `row`, the latest state of `key`, with `statement` (rows as JSON, as for `append_row`):
        in a batch, only the last row of each key, in one statement at its end; outside a batch, at once.
        The batch keeps what it reads back itself (`page_rows`)."""
        pending = self._pending_rows(curs, name)
        if pending is None:
            curs.execute(statement, as_json([row]))
            return
        kept, forgotten = pending
        forgotten.pop(key, None)
        kept[key] = row

        def write(cursor: Cursor[DictRow]) -> None:
            if kept:  # (`forget_row` may have left none)
                cursor.execute(statement, as_json(list(kept.values())))

        self.at_batch_end(curs, name, write)

    def forget_row(self, curs: Cursor[DictRow], name: str, statement: SQL, key: Hashable) -> None:
        """Deletes `key`'s row with `statement` (one parameter: keys as `as_json` sends them, as for
        `id = ANY_ID`), and the upsert of it that `keep_row` has pending, if any: in a batch, with the
        batch's others in one statement at its end; outside a batch, at once."""
        pending = self._pending_rows(curs, name)
        if pending is None:
            curs.execute(statement, as_json([key]))
            return
        kept, forgotten = pending
        kept.pop(key, None)
        forgotten[key] = None

        def delete(cursor: Cursor[DictRow]) -> None:
            if forgotten:  # (`keep_row` may have left none)
                cursor.execute(statement, as_json(list(forgotten)))

        self.at_batch_end(curs, f"forget {name}", delete)

    def _pending_rows(
        self, curs: Cursor[DictRow], name: str
    ) -> tuple[dict[Any, Any], dict[Any, None]] | None:
        """The rows of `name` to upsert and the keys to delete at the end of the batch; None outside one.
        A key is in one or the other, never both, so the order of the two statements does not matter."""
        kept = self.kept()
        if kept is None:
            return None
        return kept.setdefault(f"kept {name}", {}), kept.setdefault(f"forgotten {name}", {})

    def page_rows(self, curs: Cursor[DictRow], name: str, select: SelectRows, originator_id: UUID) -> Rows:
        """Rows (of what `select` makes of them) by aggregate id, as this transaction sees them, for
        `originator_id`. Outside a batch, `select` reads them on `curs` for `originator_id` alone. In a
        batch, it reads them once for every aggregate of the page of the same class (a table's rows are of
        one kind of aggregate; another kind's are read when asked for), and they are kept for the batch under
        `name`: the caller must keep them as it changes them (what it writes is what it reads next)."""
        batch = self._batch()
        if batch is None:
            return select(curs, [originator_id])
        rows = batch.rows.setdefault(name, {})
        selected = batch.selected.setdefault(name, set())
        if originator_id not in selected:
            page = [i for i in batch.originator_ids(originator_id) if i not in selected]
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

    def recording(self, tracking: Tracking) -> _Recording:
        """A cursor whose changes commit together with `tracking`, or not at all (a context manager)."""
        return _Recording(self, tracking)

    @contextmanager
    def _recording_alone(self, tracking: Tracking) -> Iterator[Cursor[DictRow]]:
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
