"""Group commit: concurrent saves of one process share one database transaction.

eventsourcing's PostgreSQL recorder gives each save its own transaction, and each of those takes the events
table's EXCLUSIVE lock so that notification ids become visible in the order they were issued (a projection
reading the log must never pass over an id that a slower transaction commits later). With one transaction
per save, the lock makes saves queue one at a time, each paying its own round trips and its own commit.

`GroupCommitRecorder` keeps the lock and changes what one lock holder carries. A request's thread hands its
events to the process's committer thread and waits. The committer takes every save waiting at that moment
(a *batch*), writes them in one transaction under the lock, commits, and only then wakes the waiters, each
with its own notification ids. While one batch commits, the next collects, so the busier the process, the
more saves share a commit.

What the projections and the use cases rely on is kept:
- Commit order: a batch holds the table lock from before its ids are issued until its commit, as the library
  does for a single save, so ids become visible in commit order across processes.
- A version conflict fails only its own save. The batch is first written with one statement; if that finds
  a duplicate (originator id, version), the batch is written again save by save, each under a savepoint,
  and only the saves that conflict are refused, with the same `IntegrityError` (a `RecordConflictError`) the
  library raises, which the use cases answer by reloading and trying again.
- Durability: waiters are woken only after COMMIT returns, with `synchronous_commit` left on, so a save that
  returned is on disk.
- Read-your-writes: once told the write positions' table (`keep_write_positions`), the batch also raises, in
  the same transaction, the position of each partner whose request saved in it (see
  `application.store.positions`), so the request needs no statement of its own for it; a save settled
  otherwise leaves it to the interface.

What a fault does:
- A batch waits at most `LOCK_TIMEOUT` for the table lock and runs at most `STATEMENT_TIMEOUT` per statement;
  a request waits at most `SAVE_WAIT_LIMIT` for its save. Past those it gets eventsourcing's
  `OperationalError`, which the interface answers 503 `database_unavailable` with `Retry-After`.
- A save that fails for its own data (an integrity, data or programming error) fails alone: the batch is
  written again save by save under savepoints, as for a version conflict.
- When the connection fails, the batch may or may not have committed (COMMIT may have reached the server
  before the connection was lost). The committer then reads back, on another connection, the events it sent:
  the saves found there, byte for byte, succeed with their notification ids; the others fail with the
  connection's error. So a landed save is never retried into a version conflict (a 409 for a write that
  happened). Only if the read-back itself fails does the save fail as *ambiguous*, and it is not retried.
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any
from uuid import UUID

import psycopg
from eventsourcing.persistence import (
    DataError,
    IntegrityError,
    InterfaceError,
    InternalError,
    Notification,
    NotSupportedError,
    OperationalError,
    PersistenceError,
    ProgrammingError,
    StoredEvent,
)
from eventsourcing.postgres import PostgresApplicationRecorder, PostgresDatastore
from prometheus_client import Histogram
from psycopg import Connection
from psycopg.pq import TransactionStatus
from psycopg.rows import DictRow
from psycopg.sql import SQL, Identifier, Literal
from psycopg_pool import PoolTimeout

from application.store.positions import WritePosition, current_writes
from application.store.schema_lock import SerialSchemaCreation

GROUP_COMMIT_SAVES = Histogram(
    "broker_ledger_group_commit_batch_saves",
    "Saves written together in one transaction of the event store",
    buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256),
)

# Statements are composed once, as text: psycopg would compose a `Composed` again on every execution.
BEGIN = "BEGIN"
COMMIT = "COMMIT"
# An aggregate's latest snapshot (if it has one) and its events after it, for several aggregates at once.
SINCE_SNAPSHOT = """
WITH latest AS (
    SELECT DISTINCT ON (originator_id) originator_id, originator_version, topic, state
    FROM {schema}.{snapshots} WHERE originator_id = ANY(%(ids)s)
    ORDER BY originator_id, originator_version DESC
)
SELECT originator_id, originator_version, topic, state FROM latest
UNION ALL
SELECT e.originator_id, e.originator_version, e.topic, e.state
FROM {schema}.{events} e LEFT JOIN latest l USING (originator_id)
WHERE e.originator_id = ANY(%(ids)s) AND e.originator_version > coalesce(l.originator_version, 0)
ORDER BY 1, 2
"""
# Several aggregates' histories (each from its latest snapshot, if it has one) and, for others, only their
# latest event: one backward step on the primary key each, however long their histories.
HISTORIES_AND_LATEST = """
WITH snapshot AS (
    SELECT DISTINCT ON (originator_id) originator_id, originator_version, topic, state
    FROM {schema}.{snapshots} WHERE originator_id = ANY(%(ids)s::uuid[])
    ORDER BY originator_id, originator_version DESC
)
SELECT originator_id, originator_version, topic, state FROM snapshot
UNION ALL
SELECT e.originator_id, e.originator_version, e.topic, e.state
FROM {schema}.{events} e LEFT JOIN snapshot s USING (originator_id)
WHERE e.originator_id = ANY(%(ids)s::uuid[]) AND e.originator_version > coalesce(s.originator_version, 0)
UNION ALL
SELECT last.originator_id, last.originator_version, last.topic, last.state
FROM unnest(%(latest_ids)s::uuid[]) AS wanted (originator_id) CROSS JOIN LATERAL (
    SELECT originator_id, originator_version, topic, state FROM {schema}.{events}
    WHERE originator_id = wanted.originator_id ORDER BY originator_version DESC LIMIT 1
) last
ORDER BY 1, 2
"""
MAX_BATCH_EVENTS = 2000  # events per transaction; a larger queue is written in several batches
LOCK_TIMEOUT = 5.0  # seconds a batch waits for the events table's lock
STATEMENT_TIMEOUT = 10.0  # seconds any statement of a batch may run
SAVE_WAIT_LIMIT = LOCK_TIMEOUT + STATEMENT_TIMEOUT + 5.0  # seconds a request waits for its save
READ_BACK_ATTEMPTS = (0.0, 0.2, 1.0)  # delays before each try at reading back a batch after a fault
# Errors of one save's own making: the batch is written again save by save, and only those saves fail.
SAVE_ERRORS = (
    psycopg.errors.IntegrityError,
    psycopg.errors.DataError,
    psycopg.errors.ProgrammingError,
    psycopg.errors.NotSupportedError,
)
REFUSED_BEFORE_COMMIT = frozenset({"55P03", "57014"})  # lock_not_available, query_canceled (a timeout)
# psycopg's error classes as eventsourcing's, which the use cases and the interface know.
LIBRARY_ERRORS: tuple[tuple[type[Exception], type[PersistenceError]], ...] = (
    (psycopg.errors.IntegrityError, IntegrityError),
    (psycopg.errors.DataError, DataError),
    (psycopg.errors.ProgrammingError, ProgrammingError),
    (psycopg.errors.NotSupportedError, NotSupportedError),
)


def fail_fast(method: Callable[..., Any]) -> Callable[..., Any]:
    """A read of the store, tried twice: enough to replace a connection that died (the library tries 10
    times, each waiting up to the pool's timeout for a connection: 50 s before a request learns the database
    is down). A read the server cancelled (its connection's lock or statement timeout) is not tried again:
    the caller learns within one timeout that the store is blocked."""

    @functools.wraps(method)
    def read(*args: Any, **kwargs: Any) -> Any:
        try:
            return method(*args, **kwargs)
        except (InterfaceError, OperationalError) as error:
            if getattr(error.__cause__, "sqlstate", None) in REFUSED_BEFORE_COMMIT:
                raise
        time.sleep(0.2)
        return method(*args, **kwargs)

    return read


class PendingSave:
    """One save waiting for the committer: its events, then its notification ids or its error."""

    __slots__ = ("ambiguous", "done", "error", "events", "notification_ids", "writes")

    def __init__(self, events: Sequence[StoredEvent], writes: WritePosition | None = None) -> None:
        self.events = events
        self.writes = writes if writes is not None and writes.partner is not None else None
        self.notification_ids: list[int] = []
        self.error: BaseException | None = None
        self.ambiguous = False  # failed without knowing whether its events were written
        self.done = threading.Event()

    def succeed(self, notification_ids: list[int], position_kept: bool = False) -> None:
        self.notification_ids = notification_ids
        if position_kept and self.writes is not None and notification_ids:
            self.writes.note_kept(notification_ids[-1])
        self.done.set()

    def fail(self, error: BaseException) -> None:
        self.error = error
        self.done.set()


class SaveQueue:
    """Saves waiting for the committer, taken a batch at a time."""

    def __init__(self) -> None:
        self._waiting: list[PendingSave] = []
        self._ready = threading.Condition(threading.Lock())

    def put(self, save: PendingSave) -> None:
        with self._ready:
            self._waiting.append(save)
            self._ready.notify()

    def take_batch(self, max_events: int) -> list[PendingSave]:
        """Waits for a save, then takes the waiting saves up to `max_events` events (at least one save)."""
        with self._ready:
            while not self._waiting:
                self._ready.wait()
            taken, events = 0, 0
            for save in self._waiting:
                if taken and events + len(save.events) > max_events:
                    break
                taken += 1
                events += len(save.events)
            batch, self._waiting = self._waiting[:taken], self._waiting[taken:]
            return batch

    def withdraw(self, save: PendingSave) -> bool:
        """Takes `save` back if the committer has not taken it yet (then nothing of it is written)."""
        with self._ready:
            if save in self._waiting:
                self._waiting.remove(save)
                return True
            return False


def _on_events(recorder: PostgresApplicationRecorder, text: str) -> str:
    """`text` with `{schema}.{table}` naming the recorder's events table."""
    schema, table = Identifier(recorder.datastore.schema), Identifier(recorder.events_table_name)
    return SQL(text).format(schema=schema, table=table).as_string()


class GroupCommitRecorder(SerialSchemaCreation, PostgresApplicationRecorder):
    """An application recorder whose concurrent saves share transactions (see the module docstring); it
    creates its type and tables under the schema lock (`application.store.schema_lock`)."""

    def __init__(self, datastore: PostgresDatastore, *, events_table_name: str = "stored_events") -> None:
        super().__init__(datastore, events_table_name=events_table_name)
        self.insert_keyed_statement = _on_events(
            self,
            "INSERT INTO {schema}.{table} (originator_id, originator_version, topic, state)"
            " SELECT originator_id, originator_version, topic, state"
            " FROM unnest(%b::uuid[], %b::bigint[], %b::text[], %b::bytea[]) WITH ORDINALITY"
            " AS e (originator_id, originator_version, topic, state, ordinality)"
            " ORDER BY e.ordinality"
            " RETURNING notification_id",
        )
        self.notify_statement = SQL("NOTIFY {0}").format(Identifier(self.channel_name)).as_string()
        self.select_events_of_statement = _on_events(
            self,
            "SELECT originator_id, originator_version, topic, state FROM {schema}.{table}"
            " WHERE originator_id = ANY(%(ids)s) ORDER BY originator_id, originator_version",
        )
        self.read_back_statement = _on_events(
            self,
            "SELECT originator_id, originator_version, state, notification_id FROM {schema}.{table}"
            " WHERE originator_id = ANY(%(ids)s)",
        )
        self.timeouts_statement = (
            SQL("SELECT set_config('lock_timeout', {0}, true), set_config('statement_timeout', {1}, true)")
            .format(Literal(f"{LOCK_TIMEOUT * 1000:.0f}ms"), Literal(f"{STATEMENT_TIMEOUT * 1000:.0f}ms"))
            .as_string()
        )
        # what the API's connections were opened with (libpq options): then the batch need not set them
        self.timeouts_on_connect = {
            f"lock_timeout={LOCK_TIMEOUT * 1000:.0f}",
            f"statement_timeout={STATEMENT_TIMEOUT * 1000:.0f}",
        }
        self.lock_statement = _on_events(self, "LOCK TABLE {schema}.{table} IN EXCLUSIVE MODE")
        self.positions_statement: str | None = None  # see `keep_write_positions`
        self._since_snapshot_statements: dict[str, str] = {}
        self._queue = SaveQueue()
        self._committer: threading.Thread | None = None
        self._starting = threading.Lock()
        self.batches_committed = 0  # for tests and benchmarks: how many transactions carried the saves

    def keep_write_positions(self, schema: str, table: str) -> None:
        """From now on each batch raises, with its events, the write position of each partner whose request
        saved in it, in `schema`.`table` (partner text PRIMARY KEY, position bigint) as the interface does.
        A position given as NULL is the last notification id this session drew, the batch's last event:
        under the table's lock the batch is the last thing written, so the position is no lower than the
        partner's own events and needs no lookup of them (a join with the events table, whose plan a
        small table once made a sequential scan of every event, per commit)."""
        self.positions_statement = (
            SQL(
                "INSERT INTO {positions} AS t (partner, position)"
                " SELECT w.partner,"
                " coalesce(w.position, currval(pg_get_serial_sequence({events}, 'notification_id')))"
                " FROM unnest(%b::text[], %b::bigint[]) AS w (partner, position)"
                " ON CONFLICT (partner) DO UPDATE SET position = greatest(t.position, excluded.position)"
            )
            .format(
                positions=Identifier(schema, table),
                events=Literal(Identifier(self.datastore.schema, self.events_table_name).as_string()),
            )
            .as_string()
        )

    def insert_events(self, stored_events: Sequence[StoredEvent], **kwargs: Any) -> Sequence[int] | None:
        """Hands the events to the committer and waits for them to be written. A save that failed on a
        connection and was read back as not written is tried once more; an ambiguous one is not."""
        if not stored_events:
            return []
        save = self._save(stored_events)
        if isinstance(save.error, (OperationalError, InterfaceError)) and not save.ambiguous:
            time.sleep(0.2)
            save = self._save(stored_events)
        if save.error is not None:
            raise save.error
        return save.notification_ids

    def _save(self, stored_events: Sequence[StoredEvent]) -> PendingSave:
        save = PendingSave(stored_events, current_writes())
        self._ensure_committer()
        self._queue.put(save)
        if save.done.wait(SAVE_WAIT_LIMIT):
            return save
        if self._queue.withdraw(save):
            save.fail(OperationalError(f"the database did not take this save within {SAVE_WAIT_LIMIT:g} s"))
        else:  # the committer is still writing it: it may yet land
            save.ambiguous = True
            save.fail(
                OperationalError(f"the database did not confirm this save within {SAVE_WAIT_LIMIT:g} s")
            )
        return save

    @fail_fast
    def select_events(self, *args: Any, **kwargs: Any) -> Sequence[StoredEvent]:
        return PostgresApplicationRecorder.select_events.__wrapped__(self, *args, **kwargs)

    @fail_fast
    def select_notifications(self, *args: Any, **kwargs: Any) -> Sequence[Notification]:
        return PostgresApplicationRecorder.select_notifications.__wrapped__(self, *args, **kwargs)

    @fail_fast
    def max_notification_id(self) -> int | None:
        return PostgresApplicationRecorder.max_notification_id.__wrapped__(self)

    @fail_fast
    def select_events_of(
        self, originator_ids: Sequence[UUID], snapshots_table: str | None = None
    ) -> list[StoredEvent]:
        """The events of several aggregates in one round trip, in version order per aggregate. With
        `snapshots_table`, an aggregate that has a snapshot there starts with its latest snapshot, followed
        by its events after it."""
        statement = self.select_events_of_statement
        if snapshots_table is not None:
            statement = self._since_snapshot_statement(snapshots_table)
        return self._stored_events(statement, {"ids": list(originator_ids)})

    @fail_fast
    def select_histories_and_latest_of(
        self, originator_ids: Sequence[UUID], latest_ids: Sequence[UUID], snapshots_table: str
    ) -> list[StoredEvent]:
        """In one round trip, the events of `originator_ids` as `select_events_of` reads them with
        `snapshots_table`, and of each of `latest_ids` (ids not among `originator_ids`) only its latest
        event; in version order per aggregate."""
        statement = _histories_and_latest(self.datastore.schema, self.events_table_name, snapshots_table)
        return self._stored_events(statement, {"ids": list(originator_ids), "latest_ids": list(latest_ids)})

    def _stored_events(self, statement: str, params: dict[str, Any]) -> list[StoredEvent]:
        """The stored events a read-ahead `statement` selects, in one round trip."""
        with self.datastore.get_connection() as conn, conn.cursor() as curs:
            curs.execute(statement, params, prepare=True)
            rows = curs.fetchall()
        return [
            StoredEvent(row["originator_id"], row["originator_version"], row["topic"], bytes(row["state"]))
            for row in rows
        ]

    def _since_snapshot_statement(self, snapshots_table: str) -> str:
        statement = self._since_snapshot_statements.get(snapshots_table)
        if statement is None:
            statement = (
                SQL(SINCE_SNAPSHOT)
                .format(
                    schema=Identifier(self.datastore.schema),
                    events=Identifier(self.events_table_name),
                    snapshots=Identifier(snapshots_table),
                )
                .as_string()
            )
            self._since_snapshot_statements[snapshots_table] = statement
        return statement

    def _ensure_committer(self) -> None:
        if self._committer is not None:
            return
        with self._starting:
            if self._committer is None:
                self._committer = threading.Thread(
                    target=self._commit_forever, name="group-commit", daemon=True
                )
                self._committer.start()

    def _commit_forever(self) -> None:
        while True:
            batch = self._queue.take_batch(MAX_BATCH_EVENTS)
            try:
                self.commit_batch(batch)
            except BaseException as error:  # every waiter must wake, whatever went wrong
                for save in batch:  # (the datastore has turned psycopg's errors into eventsourcing's)
                    if not save.done.is_set():
                        save.fail(error)

    def commit_batch(self, batch: list[PendingSave]) -> None:
        """Writes `batch` in one transaction and wakes its waiters after COMMIT."""
        GROUP_COMMIT_SAVES.observe(len(batch))
        try:
            with self.datastore.get_connection() as conn:
                try:
                    ids, kept = self._write_together(conn, batch)
                except SAVE_ERRORS:
                    self._write_one_by_one(conn, batch)
                    return
        except (OperationalError, InterfaceError) as fault:
            self._settle_after_fault(batch, fault)
            return
        self.batches_committed += 1
        start = 0
        for save in batch:
            save.succeed(ids[start : start + len(save.events)], position_kept=kept)
            start += len(save.events)

    def _write_together(self, conn: Connection[DictRow], batch: list[PendingSave]) -> tuple[list[int], bool]:
        """One round trip: BEGIN, lock, NOTIFY, INSERT ... RETURNING, the partners' write positions and
        COMMIT, pipelined. The notification ids, and whether the write positions were kept with them."""
        columns = _columns([event for save in batch for event in save.events])
        positions = self._positions(batch)
        try:
            with conn.cursor() as control, conn.cursor() as insert, conn.pipeline() as pipeline:
                control.execute(BEGIN)
                self._lock_table(control)
                control.execute(self.notify_statement)
                insert.execute(self.insert_keyed_statement, columns, prepare=True, binary=True)
                if positions is not None:
                    control.execute(self.positions_statement, positions, prepare=True, binary=True)
                control.execute(COMMIT)
                pipeline.sync()
                ids = [row["notification_id"] for row in insert.fetchall()]
        except BaseException:
            if conn.info.transaction_status != TransactionStatus.IDLE:
                conn.rollback()
            raise
        if len(ids) != len(columns[0]):
            raise OperationalError(f"inserted {len(columns[0])} events but got {len(ids)} notification ids")
        return ids, positions is not None

    def _positions(
        self, batch: Sequence[PendingSave], written: Sequence[Sequence[int]] | None = None
    ) -> tuple[list[str], list[int | None]] | None:
        """The write positions statement's parameters: each partner whose request saved in `batch`, with
        its last notification id among `written` (each save's ids) or, without them, NULL (the batch's
        last); None when there is nothing to keep."""
        if self.positions_statement is None:
            return None
        last: dict[str, int | None] = {}
        for index, save in enumerate(batch):
            if save.writes is None or not save.events:
                continue
            partner = save.writes.partner
            if written is None:
                last[partner] = None
            else:
                last[partner] = max(written[index][-1], last.get(partner) or 0)
        if not last:
            return None
        partners = sorted(last)  # one row each, in one order
        return partners, [last[partner] for partner in partners]

    def _write_one_by_one(self, conn: Connection[DictRow], batch: list[PendingSave]) -> None:
        """The conflict path: each save under its own savepoint; only the conflicting ones are refused."""
        outcomes: list[tuple[PendingSave, list[int] | BaseException]] = []
        with conn.transaction(), conn.cursor() as curs:
            self._lock_table(curs)
            curs.execute(self.notify_statement)
            for save in batch:
                try:
                    with conn.transaction():
                        curs.execute(
                            self.insert_keyed_statement, _columns(save.events), prepare=True, binary=True
                        )
                        outcomes.append((save, [row["notification_id"] for row in curs.fetchall()]))
                except SAVE_ERRORS as refused:
                    outcomes.append((save, _as_library_error(refused)))
            kept = self._keep_positions_alone(
                curs, [(save, outcome) for save, outcome in outcomes if isinstance(outcome, list)]
            )
        self.batches_committed += 1
        for save, outcome in outcomes:  # only now, after COMMIT
            if isinstance(outcome, BaseException):
                save.fail(outcome)
            else:
                save.succeed(outcome, position_kept=kept)

    def _keep_positions_alone(self, curs: Any, written: list[tuple[PendingSave, list[int]]]) -> bool:
        """The write positions of the saves written one by one, under a savepoint of their own: if they
        cannot be kept here the saves stand, and the interface keeps the positions."""
        positions = self._positions([save for save, _ in written], [ids for _, ids in written])
        if positions is None:
            return False
        try:
            with curs.connection.transaction():
                curs.execute(self.positions_statement, positions, prepare=True, binary=True)
        except psycopg.Error:
            return False
        return True

    def _settle_after_fault(self, batch: list[PendingSave], fault: BaseException) -> None:
        """After a connection fault: the saves whose events are in the store succeed, the others fail."""
        if not _may_have_committed(fault):
            for save in batch:
                save.fail(fault)
            return
        found = self._read_back(batch)
        if found is None:
            for save in batch:
                save.ambiguous = True
                save.fail(fault)
            return
        for save in batch:
            keys = [(event.originator_id, event.originator_version, event.state) for event in save.events]
            if all(key in found for key in keys):
                save.succeed([found[key] for key in keys])
            else:
                save.fail(fault)

    def _read_back(self, batch: list[PendingSave]) -> dict[tuple[UUID, int, bytes], int] | None:
        """The notification ids of the batch's events as stored now, keyed by (originator id, version,
        state): the same bytes, so another writer's events at those versions do not count. None if the
        store cannot be read."""
        originator_ids = list({event.originator_id for save in batch for event in save.events})
        for delay in READ_BACK_ATTEMPTS:
            time.sleep(delay)
            try:
                with self.datastore.get_connection() as conn, conn.cursor() as curs:
                    curs.execute(self.read_back_statement, {"ids": originator_ids})
                    rows = curs.fetchall()
            except (OperationalError, InterfaceError):
                continue
            return {
                (row["originator_id"], row["originator_version"], bytes(row["state"])): row["notification_id"]
                for row in rows
            }
        return None

    def _lock_table(self, curs: Any) -> None:
        """The library's table lock, with this recorder's lock and statement timeouts: set for the
        transaction, unless the connection was opened with them (nothing changes them after)."""
        if not self._opened_with_timeouts(curs.connection):
            curs.execute(self.timeouts_statement, prepare=True)
        curs.execute(self.lock_statement, prepare=True)

    def _opened_with_timeouts(self, conn: Connection[Any]) -> bool:
        """True when `conn` was opened with exactly this recorder's timeouts in its libpq options (as
        `application.store.database` opens the API's): `-c lock_timeout=5000 -c statement_timeout=10000`."""
        words = conn.info.options.replace("-c", " ").split()
        settings = {word for word in words if word.startswith(("lock_timeout=", "statement_timeout="))}
        return settings == self.timeouts_on_connect


@functools.cache
def _histories_and_latest(schema: str, events_table: str, snapshots_table: str) -> str:
    return (
        SQL(HISTORIES_AND_LATEST)
        .format(
            schema=Identifier(schema), events=Identifier(events_table), snapshots=Identifier(snapshots_table)
        )
        .as_string()
    )


def _may_have_committed(fault: BaseException) -> bool:
    """False when the batch surely did not commit: no connection was had, or the server refused a statement
    before COMMIT (a lock or statement timeout)."""
    cause = fault.__cause__
    if isinstance(cause, PoolTimeout):
        return False
    return getattr(cause, "sqlstate", None) not in REFUSED_BEFORE_COMMIT


def _as_library_error(error: Exception) -> PersistenceError:
    for psycopg_class, library_class in LIBRARY_ERRORS:
        if isinstance(error, psycopg_class):
            return library_class(str(error))
    return InternalError(str(error))


def _columns(events: Sequence[StoredEvent]) -> tuple[list[UUID], list[int], list[str], list[bytes]]:
    """The events as four arrays, which psycopg sends far faster than an array of composite values (and,
    as `%b` parameters, in binary: the states as they are, not escaped as text)."""
    return (
        [event.originator_id for event in events],
        [event.originator_version for event in events],
        [event.topic for event in events],
        [event.state for event in events],
    )
