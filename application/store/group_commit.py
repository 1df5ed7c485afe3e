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
  does for a single save, so ids become visible in commit order across processes. The lock is the serial
  point of every save of the cluster, so a batch does under it as little as it can: the statements riding
  with it come first, then ONE statement takes the lock, notifies and writes the events and the write
  positions (`application.store.append_function`), and COMMIT follows at once; the time each batch held the
  lock is in `broker_ledger_events_lock_held_seconds` (bench/serial_point.py, docs/scaling.md).
- A version conflict fails only its own save, with the same `IntegrityError` (a `RecordConflictError`) the
  library raises, which the use cases answer by reloading and trying again. A save that writes a version an
  earlier save of the batch writes is refused before anything is sent; if the batch written together finds
  a version already stored, the saves that write stored versions are looked up (one query, no lock) and
  refused, and the others written together again. Only if that too is refused is the batch written save by
  save, each under a savepoint (the lock held throughout, a round trip a save: `..._one_by_one_total`).
- Durability: waiters are woken only after COMMIT returns, with `synchronous_commit` left on, so a save that
  returned is on disk.
- Read-your-writes: once told the write positions' table (`keep_write_positions`), the batch also raises, in
  the same transaction, the position of each partner whose request saved in it (the save's `unit`, see
  `application.store.unit_of_work`), so the request needs no statement of its own for it; a save settled
  otherwise leaves it to the interface.
- Companions (`write_along`, `application.store.save_queue`): statements on another table, from an event
  loop, ride in the next batch's transaction, with its events or alone (then without the table's lock and
  NOTIFY), and their waiter gets each statement's rows after COMMIT. The interface's Idempotency-Key claims
  and answers go this way, so they need no transaction, commit and round trip of their own. A companion
  the database refuses fails alone (under a savepoint, as a refused save, with psycopg's error); after a
  connection fault it fails, since it cannot be read back (it may have committed).
- The batch's arrays are built in PostgreSQL's binary format in one pass (`application.store.binary_arrays`).

What a fault does:
- A batch waits at most `LOCK_TIMEOUT` for the table lock and runs at most `STATEMENT_TIMEOUT` per statement;
  a request waits at most `SAVE_WAIT_LIMIT` for its save. Past those it gets eventsourcing's
  `OperationalError`, which the interface answers 503 `database_unavailable` with `Retry-After`.
- The committer cannot wedge: a batch that holds its connection longer than `COMMIT_DEADLINE` (a wait the
  server's timeouts do not bound: a server waiting for the client, a silent network) is interrupted and its
  connection shut down (`application.store.commit_watch`); the batch is settled as after a lost connection
  (below) and the next one runs on a new connection. `stalled` says when the committer does not commit
  (GET /health).
- The batch's pipeline is left (its block ends), never synced with `Pipeline.sync()` (psycopg 3.3): the
  sync sends the last messages with one non-blocking flush, ignores what it could not send and waits for
  the server's answer. A statement larger than the socket takes in a few tries (about 2 MB over a Unix
  socket, such as the embedded server's; tens of MB over TCP; less in a busy process) stayed half in
  libpq's buffer: the server waited for the rest (`ClientRead`), the committer for the server, for ever,
  and every save of the process behind it. Leaving the pipeline flushes until all is sent.
- A save that fails for its own data (an integrity, data or programming error) fails alone: the batch is
  written again save by save under savepoints, as for a version conflict.
- When the connection fails, the batch may or may not have committed (COMMIT may have reached the server
  before the connection was lost). The committer reads back the events it sent (`application.store.
  read_back`): the saves found there succeed, the others fail with the connection's error, so a landed save
  is never retried into a version conflict.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Sequence
from typing import Any
from uuid import UUID

import psycopg
from eventsourcing.persistence import (
    DataError,
    IntegrityError,
    InterfaceError,
    InternalError,
    NotSupportedError,
    OperationalError,
    PersistenceError,
    ProgrammingError,
    StoredEvent,
)
from eventsourcing.postgres import PostgresApplicationRecorder, PostgresDatastore
from prometheus_client import Counter, Histogram
from psycopg import Connection
from psycopg.pq import TransactionStatus
from psycopg.rows import DictRow, tuple_row
from psycopg.sql import SQL, Identifier, Literal

from application.store.append_function import AppendFunction
from application.store.binary_arrays import ByteaArray, Int8Array, TextArray, UUIDArray
from application.store.commit_watch import CommitProgress, CommitWatch, WatchedUse
from application.store.database import CLIENT_CHECK_SECONDS
from application.store.read_ahead import ReadAheadQueries
from application.store.read_back import ReadBack
from application.store.save_queue import (
    CompanionRefused,
    PendingSave,
    Rows,
    SaveQueue,
    Statement,
    companion,
)
from application.store.schema_lock import SerialSchemaCreation
from application.store.unit_of_work import UnitOfWork

GROUP_COMMIT_SAVES = Histogram(
    "broker_ledger_group_commit_batch_saves",
    "Saves written together in one transaction of the event store",
    buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256),
)
GROUP_COMMIT_ONE_BY_ONE = Counter(
    "broker_ledger_group_commit_one_by_one",
    "Batches written save by save under savepoints, the events table's lock held throughout, after the "
    "database refused the batch written together",
)
GROUP_COMMIT_CONFLICTS = Counter(
    "broker_ledger_group_commit_conflicts",
    "Saves refused before their batch took the events table's lock: an aggregate version another save of "
    "the batch writes, or one already stored",
)
GROUP_COMMIT_EVENTS = Counter(
    "broker_ledger_group_commit_events", "Events written by the group committer's transactions"
)
EVENTS_LOCK_HELD = Histogram(
    "broker_ledger_events_lock_held_seconds",
    "Time a batch held the events table's lock, on the server's clock: from the lock granted to just after "
    "COMMIT (save by save: on the committer's clock); the serial point of every save of the cluster",
    buckets=(0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5),
)

# Statements are composed once, as text: psycopg would compose a `Composed` again on every execution.
BEGIN = "BEGIN"
COMMIT = "COMMIT"
# the server's clock, read right after the events table's lock is granted and right after COMMIT released it
SERVER_CLOCK = "SELECT extract(epoch FROM clock_timestamp())::float8"
MAX_BATCH_EVENTS = 2000  # events per transaction; a larger queue is written in several batches
LOCK_TIMEOUT = 5.0  # seconds a batch waits for the events table's lock
STATEMENT_TIMEOUT = 10.0  # seconds any statement of a batch may run
SAVE_WAIT_LIMIT = LOCK_TIMEOUT + STATEMENT_TIMEOUT + 5.0  # seconds a request waits for its save
# seconds a batch (or a read back) may hold its connection, then it is interrupted; within SAVE_WAIT_LIMIT, so
# that the batch's waiters get its error rather than give up on it
COMMIT_DEADLINE = LOCK_TIMEOUT + STATEMENT_TIMEOUT
# Errors of one save's own making: the batch is written again save by save, and only those saves fail.
SAVE_ERRORS = (
    psycopg.errors.IntegrityError,
    psycopg.errors.DataError,
    psycopg.errors.ProgrammingError,
    psycopg.errors.NotSupportedError,
)
# psycopg's error classes as eventsourcing's, which the use cases and the interface know.
LIBRARY_ERRORS: tuple[tuple[type[Exception], type[PersistenceError]], ...] = (
    (psycopg.errors.IntegrityError, IntegrityError),
    (psycopg.errors.DataError, DataError),
    (psycopg.errors.ProgrammingError, ProgrammingError),
    (psycopg.errors.NotSupportedError, NotSupportedError),
)


def _on_events(recorder: PostgresApplicationRecorder, text: str) -> str:
    """`text` with `{schema}.{table}` naming the recorder's events table."""
    schema, table = Identifier(recorder.datastore.schema), Identifier(recorder.events_table_name)
    return SQL(text).format(schema=schema, table=table).as_string()


class GroupCommitRecorder(SerialSchemaCreation, ReadAheadQueries):
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
        self.stored_versions_statement = _on_events(
            self,
            "SELECT originator_id, originator_version FROM {schema}.{table}"
            " WHERE (originator_id, originator_version) IN"
            " (SELECT * FROM unnest(%b::uuid[], %b::bigint[]))",
        )
        self.read_back_statement = _on_events(
            self,
            "SELECT originator_id, originator_version, state, notification_id FROM {schema}.{table}"
            " WHERE originator_id = ANY(%(ids)s)",
        )
        self.timeouts_statement = (
            SQL(
                "SELECT set_config('lock_timeout', {0}, true), set_config('statement_timeout', {1}, true),"
                " set_config('client_connection_check_interval', {2}, true)"
            )
            .format(
                Literal(f"{LOCK_TIMEOUT * 1000:.0f}ms"),
                Literal(f"{STATEMENT_TIMEOUT * 1000:.0f}ms"),
                Literal(f"{CLIENT_CHECK_SECONDS * 1000:.0f}ms"),
            )
            .as_string()
        )
        # what the API's connections were opened with (libpq options): then the batch need not set them
        self.timeouts_on_connect = {
            f"lock_timeout={LOCK_TIMEOUT * 1000:.0f}",
            f"statement_timeout={STATEMENT_TIMEOUT * 1000:.0f}",
        }
        self.lock_statement = _on_events(self, "LOCK TABLE {schema}.{table} IN EXCLUSIVE MODE")
        self.positions_statement: str | None = None  # see `keep_write_positions`
        self.append = AppendFunction(self.datastore.schema, self.events_table_name, self.channel_name)
        self._queue = SaveQueue()
        self._committer: threading.Thread | None = None
        self._starting = threading.Lock()
        self._watch = CommitWatch()
        self._read_back = ReadBack(datastore, self.read_back_statement, self._watch)
        self.progress = CommitProgress()
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
        self.append = AppendFunction(
            self.datastore.schema, self.events_table_name, self.channel_name, positions=(schema, table)
        )

    def insert_events(
        self, stored_events: Sequence[StoredEvent], *, unit: UnitOfWork | None = None, **kwargs: Any
    ) -> Sequence[int] | None:
        """Hands the events to the committer and waits for them to be written; `unit` is the request's unit
        of work (`LedgerStore.save` passes it through the library's save): its partner's write position is
        kept with the events, and the statements waiting for its first save ride with them. A save that
        failed on a connection and was read back as not written is tried once more; an ambiguous one is
        not."""
        if not stored_events:
            return []
        save = self._save(stored_events, unit)
        if isinstance(save.error, (OperationalError, InterfaceError)) and not save.ambiguous:
            time.sleep(0.2)
            save = self._save(stored_events, unit)
        if save.error is not None:
            raise save.error
        return save.notification_ids

    def _save(self, stored_events: Sequence[StoredEvent], unit: UnitOfWork | None) -> PendingSave:
        """Queues one save of `unit` (with the statements waiting for its first save) and waits for it."""
        riding = unit.statements_for_next_save() if unit is not None else None
        save = PendingSave(stored_events, unit, statements=riding.statements if riding is not None else ())
        if riding is not None:
            save.on_done = riding.after
        self._ensure_committer()
        self._queue.put(save)
        if not save.done.wait(SAVE_WAIT_LIMIT):
            save.fail(self._overdue(save, "this save"))
        return save

    async def write_along(self, statements: Sequence[Statement]) -> list[Rows]:
        """Runs `statements` (in order, their parameters in binary) in the committer's next transaction,
        with the events of that batch or alone, and gives the rows each returned, awaited on the running
        event loop. If one of them fails, only this companion fails, with psycopg's error; a fault of the
        connection fails it with eventsourcing's, as it fails the saves (then it may have committed)."""
        save, rows = companion(statements, asyncio.get_running_loop())
        self._ensure_committer()
        self._queue.put(save)
        try:
            return await asyncio.wait_for(asyncio.shield(rows), SAVE_WAIT_LIMIT)
        except TimeoutError:
            raise self._overdue(save, "these statements") from None

    def _overdue(self, save: PendingSave, what: str) -> OperationalError:
        """The error of a save or companion not done within SAVE_WAIT_LIMIT: taken back if the committer has
        not taken it (nothing of it is written), else ambiguous (the committer is still writing it: it may
        yet land)."""
        if self._queue.withdraw(save):
            return OperationalError(f"the database did not take {what} within {SAVE_WAIT_LIMIT:g} s")
        save.ambiguous = True
        return OperationalError(f"the database did not confirm {what} within {SAVE_WAIT_LIMIT:g} s")

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
            committed = self.batches_committed
            self.progress.began()
            try:
                self.commit_batch(batch)
            except BaseException as error:  # every waiter must wake, whatever went wrong
                for save in batch:  # (the datastore has turned psycopg's errors into eventsourcing's)
                    if not save.done.is_set():
                        save.fail(error)
            failure = next((save.error for save in batch if save.error is not None), None)
            self.progress.ended(self.batches_committed > committed, failure)

    def stalled(self) -> str | None:
        """Why this process's committer does not commit, or None (GET /health): a batch under way, or
        batches failing while saves keep coming, or saves waiting, for longer than COMMIT_DEADLINE
        (`application.store.commit_watch.CommitProgress`)."""
        return self.progress.stalled(COMMIT_DEADLINE, self._queue.waiting_for())

    def commit_batch(self, batch: list[PendingSave]) -> None:
        """Writes `batch` in one transaction and wakes its waiters after COMMIT; a batch that holds its
        connection longer than COMMIT_DEADLINE is interrupted, and settled as after a lost connection."""
        saves = sum(1 for save in batch if save.events)
        if saves:
            GROUP_COMMIT_SAVES.observe(saves)
        use: WatchedUse | None = None
        batch = self._refuse_taken(batch, set())
        try:
            with self.datastore.get_connection() as conn, self._watch.watching(conn, COMMIT_DEADLINE) as use:
                written = self._write(conn, batch)
        except (OperationalError, InterfaceError) as fault:
            pending = [save for save in batch if not save.done.is_set()]  # less those `_write` refused
            self._read_back.settle(pending, _overran(use, fault), COMMIT_DEADLINE)
            return
        if written is None:  # written save by save, each settled there
            return
        saves, ids, kept = written
        self.batches_committed += 1
        start = 0
        for save in saves:
            save.succeed(ids[start : start + len(save.events)], position_kept=kept)
            start += len(save.events)

    def _write(
        self, conn: Connection[DictRow], batch: list[PendingSave]
    ) -> tuple[list[PendingSave], list[int], bool] | None:
        """`batch` written together: the saves written (those that write a version already stored are
        refused, and the others written together again), their notification ids and whether the write
        positions were kept with them; None when the batch had to be written save by save."""
        try:
            return batch, *self._write_together(conn, batch)
        except psycopg.errors.UniqueViolation:
            batch = self._refuse_taken(batch, self._stored_versions(conn, batch))
        except SAVE_ERRORS:
            self._write_one_by_one(conn, batch)
            return None
        try:
            return batch, *self._write_together(conn, batch)
        except SAVE_ERRORS:
            self._write_one_by_one(conn, batch)
            return None

    def _refuse_taken(self, batch: list[PendingSave], stored: set[tuple[UUID, int]]) -> list[PendingSave]:
        """Fails, before any lock is taken, each save bound to lose a race on an aggregate version: one that
        writes a version `stored` holds, or one an earlier save of the batch writes (two requests of this
        process that loaded the same aggregate); returns the others. Written together, the batch would be
        refused whole and written again save by save under the lock, each save a round trip."""
        taken = set(stored)
        writing = []
        for save in batch:
            versions = {(event.originator_id, event.originator_version) for event in save.events}
            conflict = next(iter(versions & taken), None)
            if conflict is None:
                taken |= versions
                writing.append(save)
                continue
            GROUP_COMMIT_CONFLICTS.inc()
            save.fail(
                IntegrityError(f"aggregate {conflict[0]} version {conflict[1]} is taken by another save")
            )
        return writing

    def _stored_versions(self, conn: Connection[DictRow], batch: list[PendingSave]) -> set[tuple[UUID, int]]:
        """Which of the batch's (originator id, version) pairs the events table holds already (no lock)."""
        events = [event for save in batch for event in save.events]
        pairs = (
            UUIDArray([event.originator_id for event in events]),
            Int8Array([e.originator_version for e in events]),
        )
        with conn.cursor(row_factory=tuple_row) as cursor:
            rows = cursor.execute(self.stored_versions_statement, pairs, prepare=True, binary=True).fetchall()
        return {(originator_id, version) for originator_id, version in rows}

    def _write_together(self, conn: Connection[DictRow], batch: list[PendingSave]) -> tuple[list[int], bool]:
        """One round trip, pipelined: BEGIN, the statements riding with the batch (the saves' own and the
        companions'), then the append (`application.store.append_function`: the table's lock, NOTIFY, the
        events and the partners' write positions in one statement) and COMMIT, so that under the lock the
        server waits for nothing but the COMMIT message (a batch of companions alone takes no lock and sends
        no NOTIFY). The notification ids, and whether the write positions were kept with them; each
        companion's rows are put on it."""
        columns = _columns([event for save in batch for event in save.events])
        if columns[0]:
            self.append.ensure(conn)
        partners = self._partners(batch)
        companions = [save for save in batch if save.statements]
        try:
            with (
                conn.cursor() as control,
                conn.cursor(row_factory=tuple_row) as append,
                conn.cursor(row_factory=tuple_row) as released,
            ):
                with conn.pipeline():  # left, never synced (see the module docstring)
                    control.execute(BEGIN)
                    self._set_timeouts(control)
                    cursors = [_sent(conn, save.statements) for save in companions]
                    if columns[0]:
                        append.execute(self.append.call, (*columns, partners), prepare=True, binary=True)
                    control.execute(COMMIT)
                    if columns[0]:
                        released.execute(SERVER_CLOCK, prepare=True)
                ids: list[int] = []
                if columns[0]:
                    ids, granted = append.fetchone()
                    EVENTS_LOCK_HELD.observe(max(released.fetchone()[0] - granted, 0.0))
                    GROUP_COMMIT_EVENTS.inc(len(columns[0]))
                rows = [[cursor.fetchall() for cursor in sent] for sent in cursors]
        except BaseException:
            if conn.info.transaction_status != TransactionStatus.IDLE:
                conn.rollback()
            raise
        if len(ids) != len(columns[0]):
            raise OperationalError(f"inserted {len(columns[0])} events but got {len(ids)} notification ids")
        for save, returned in zip(companions, rows, strict=True):
            save.rows = returned
        return ids, len(partners) > 0

    def _partners(self, batch: Sequence[PendingSave]) -> TextArray:
        """The partners whose requests saved in `batch`, for the append's write positions (none when no
        positions are kept)."""
        if self.positions_statement is None:
            return TextArray([])
        return TextArray(
            sorted({save.unit.partner for save in batch if save.unit is not None and save.events})
        )

    def _positions(
        self, batch: Sequence[PendingSave], written: Sequence[Sequence[int]] | None = None
    ) -> tuple[TextArray, Int8Array] | None:
        """The write positions statement's parameters: each partner whose request saved in `batch`, with
        its last notification id among `written` (each save's ids) or, without them, NULL (the batch's
        last); None when there is nothing to keep."""
        if self.positions_statement is None:
            return None
        last: dict[str, int | None] = {}
        for index, save in enumerate(batch):
            if save.unit is None or not save.events:
                continue
            partner = save.unit.partner
            if written is None:
                last[partner] = None
            else:
                last[partner] = max(written[index][-1], last.get(partner) or 0)
        if not last:
            return None
        partners = sorted(last)  # one row each, in one order
        return TextArray(partners), Int8Array([last[partner] for partner in partners])

    def _write_one_by_one(self, conn: Connection[DictRow], batch: list[PendingSave]) -> None:
        """The conflict path: each save (and each companion) under its own savepoint; only those refused
        fail, a save with the library's error, a companion with psycopg's."""
        GROUP_COMMIT_ONE_BY_ONE.inc()
        outcomes: list[tuple[PendingSave, list[int] | BaseException]] = []
        locked_at: float | None = None
        with conn.transaction(), conn.cursor() as curs:
            self._set_timeouts(curs)
            if any(save.events for save in batch):
                curs.execute(self.lock_statement, prepare=True)
                locked_at = time.monotonic()
                curs.execute(self.notify_statement)
            for save in batch:
                try:
                    with conn.transaction():
                        outcomes.append((save, self._write_alone(conn, curs, save)))
                except SAVE_ERRORS as refused:
                    outcomes.append((save, _as_library_error(refused) if save.events else refused))
                except CompanionRefused as refused:
                    outcomes.append((save, refused))
            kept = self._keep_positions_alone(
                curs, [(save, outcome) for save, outcome in outcomes if isinstance(outcome, list)]
            )
        if locked_at is not None:
            EVENTS_LOCK_HELD.observe(time.monotonic() - locked_at)
        self.batches_committed += 1
        for save, outcome in outcomes:  # only now, after COMMIT
            if isinstance(outcome, BaseException):
                save.fail(outcome)
            else:
                save.succeed(outcome, position_kept=kept)

    def _write_alone(self, conn: Connection[DictRow], curs: Any, save: PendingSave) -> list[int]:
        """One save's events (their notification ids) and the statements riding with them, or one
        companion's statements (their rows put on the save). Statements refused with events raise
        `CompanionRefused`, which rolls the save's savepoint back, events and all."""
        if not save.events:
            save.rows = [cursor.fetchall() for cursor in _sent(conn, save.statements)]
            return []
        curs.execute(self.insert_keyed_statement, _columns(save.events), prepare=True, binary=True)
        ids = [row["notification_id"] for row in curs.fetchall()]
        if save.statements:
            try:
                save.rows = [cursor.fetchall() for cursor in _sent(conn, save.statements)]
            except SAVE_ERRORS as refused:
                raise CompanionRefused(str(refused)) from refused
        return ids

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

    def _set_timeouts(self, curs: Any) -> None:
        """This recorder's lock and statement timeouts, for the transaction, unless the connection was
        opened with them (nothing changes them after). The library's table lock follows, if the batch has
        events."""
        if not self._opened_with_timeouts(curs.connection):
            curs.execute(self.timeouts_statement, prepare=True)

    def _opened_with_timeouts(self, conn: Connection[Any]) -> bool:
        """True when `conn` was opened with exactly this recorder's timeouts in its libpq options (as
        `application.store.database` opens the API's): `-c lock_timeout=5000 -c statement_timeout=10000`."""
        words = conn.info.options.replace("-c", " ").split()
        settings = {word for word in words if word.startswith(("lock_timeout=", "statement_timeout="))}
        return settings == self.timeouts_on_connect


def _sent(conn: Connection[Any], statements: Sequence[Statement]) -> list[Any]:
    """Executes a companion's statements, each on a cursor of its own (rows as tuples), and returns the
    cursors: in a pipeline their rows are there once it is left."""
    cursors = []
    for statement, parameters in statements:
        cursor = conn.cursor(row_factory=tuple_row)
        cursor.execute(statement, parameters, prepare=True, binary=True)
        cursors.append(cursor)
    return cursors


def _overran(use: WatchedUse | None, fault: PersistenceError) -> PersistenceError:
    """The fault of a batch, saying so when the watch interrupted it; its cause stays the connection's own
    error (`read_back.may_have_committed` judges by it)."""
    if use is None or not use.interrupted:
        return fault
    overran = OperationalError(
        f"the database did not finish a batch within {use.seconds:g} s; its connection was replaced ({fault})"
    )
    overran.__cause__ = fault.__cause__
    return overran


def _as_library_error(error: Exception) -> PersistenceError:
    for psycopg_class, library_class in LIBRARY_ERRORS:
        if isinstance(error, psycopg_class):
            return library_class(str(error))
    return InternalError(str(error))


def _columns(events: Sequence[StoredEvent]) -> tuple[UUIDArray, Int8Array, TextArray, ByteaArray]:
    """The events as four arrays, which psycopg sends far faster than an array of composite values; as
    binary arrays built in one pass (`application.store.binary_arrays`), the states as they are."""
    return (
        UUIDArray([event.originator_id for event in events]),
        Int8Array([event.originator_version for event in events]),
        TextArray([event.topic for event in events]),
        ByteaArray([event.state for event in events]),
    )
