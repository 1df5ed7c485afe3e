"""How the group committer writes a batch (`BatchWriting`, mixed into `GroupCommitRecorder`): together in one
pipelined transaction, the append under the events table's lock (`application.store.group_commit.
append_function`) and COMMIT at once; saves bound to lose a version race refused before the lock; the batch
written save by save under savepoints when the database refuses it together. The rules are the package's
docstring's (`application.store.group_commit`).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any
from uuid import UUID

import psycopg
from eventsourcing.persistence import (
    DataError,
    IntegrityError,
    InternalError,
    NotSupportedError,
    OperationalError,
    PersistenceError,
    ProgrammingError,
    StoredEvent,
)
from prometheus_client import Counter, Histogram
from psycopg import Connection
from psycopg.pq import TransactionStatus
from psycopg.rows import DictRow, tuple_row

from application.store.binary_arrays import ByteaArray, Int8Array, TextArray, UUIDArray
from application.store.group_commit.append_function import AppendFunction
from application.store.group_commit.riding import sent
from application.store.group_commit.types import PendingSave
from application.store.request_writes import CompanionRefused

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


class BatchWriting:
    """The writing of a batch, on the statements the recorder composed for its events table (see
    `GroupCommitRecorder.__init__` and `keep_write_positions`)."""

    append: AppendFunction
    insert_keyed_statement: str
    notify_statement: str
    stored_versions_statement: str
    lock_statement: str
    timeouts_statement: str
    timeouts_on_connect: set[str]
    positions_statement: str | None
    batches_committed: int

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
        companions', a `BatchedRow` statement once for all its rows: `application.store.group_commit.riding`),
        then the append (`application.store.group_commit.append_function`: the table's lock,
        NOTIFY, the events and the partners' write positions in one statement) and COMMIT, so that under the
        lock the server waits for nothing but the COMMIT message (a batch of companions alone takes no lock
        and sends no NOTIFY). The notification ids, and whether the write positions were kept with them; each
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
                    readers = sent(conn, [save.statements for save in companions])
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
                rows = [[reader.fetchall() for reader in of_save] for of_save in readers]
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
            save.rows = [reader.fetchall() for reader in sent(conn, [save.statements])[0]]
            return []
        curs.execute(self.insert_keyed_statement, _columns(save.events), prepare=True, binary=True)
        ids = [row["notification_id"] for row in curs.fetchall()]
        if save.statements:
            try:
                save.rows = [reader.fetchall() for reader in sent(conn, [save.statements])[0]]
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
