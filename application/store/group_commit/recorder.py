"""`GroupCommitRecorder`: the recorder whose concurrent saves of one process share one transaction.

Its side of the process's requests: a save (or a companion) queued and waited for within `SAVE_WAIT_LIMIT`,
the committer thread taking the waiting saves a batch at a time, each batch written within `COMMIT_DEADLINE`
(else interrupted and read back) and `stalled` when it does not commit. How a batch is written is
`application.store.group_commit.batches`; the rules of both, `application.store.group_commit`.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from typing import Any

from eventsourcing.persistence import InterfaceError, OperationalError, PersistenceError, StoredEvent
from eventsourcing.postgres import PostgresApplicationRecorder, PostgresDatastore
from prometheus_client import Histogram
from psycopg.sql import SQL, Identifier, Literal

from application.store.database import CLIENT_CHECK_SECONDS
from application.store.group_commit.append_function import AppendFunction
from application.store.group_commit.batches import BatchWriting
from application.store.group_commit.commit_watch import CommitProgress, CommitWatch, WatchedUse
from application.store.group_commit.read_back import ReadBack
from application.store.group_commit.save_queue import SaveQueue, awaited_on, companion
from application.store.group_commit.types import PendingSave
from application.store.on_loop import on_loop, pause, wait_for
from application.store.read_ahead import ReadAheadQueries
from application.store.request_writes import RequestWrites, Rows, Statement
from application.store.schema_lock import SerialSchemaCreation

GROUP_COMMIT_SAVES = Histogram(
    "broker_ledger_group_commit_batch_saves",
    "Saves written together in one transaction of the event store",
    buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256),
)
MAX_BATCH_EVENTS = 2000  # events per transaction; a larger queue is written in several batches
LOCK_TIMEOUT = 5.0  # seconds a batch waits for the events table's lock
STATEMENT_TIMEOUT = 10.0  # seconds any statement of a batch may run
SAVE_WAIT_LIMIT = LOCK_TIMEOUT + STATEMENT_TIMEOUT + 5.0  # seconds a request waits for its save
# seconds a batch (or a read back) may hold its connection, then it is interrupted; within SAVE_WAIT_LIMIT, so
# that the batch's waiters get its error rather than give up on it
COMMIT_DEADLINE = LOCK_TIMEOUT + STATEMENT_TIMEOUT


def _on_events(recorder: PostgresApplicationRecorder, text: str) -> str:
    """`text` with `{schema}.{table}` naming the recorder's events table."""
    schema, table = Identifier(recorder.datastore.schema), Identifier(recorder.events_table_name)
    return SQL(text).format(schema=schema, table=table).as_string()


class GroupCommitRecorder(BatchWriting, SerialSchemaCreation, ReadAheadQueries):
    """An application recorder whose concurrent saves share transactions (see the package's docstring,
    `application.store.group_commit`): its queue and committer thread here, how a batch is written in
    `BatchWriting`; it creates its type and tables under the schema lock (`application.store.schema_lock`)."""

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
        self, stored_events: Sequence[StoredEvent], *, unit: RequestWrites | None = None, **kwargs: Any
    ) -> Sequence[int] | None:
        """Hands the events to the committer and waits for them to be written; `unit` is the request's writes
        (`RequestWrites`; `LedgerStore.save` passes it through the library's save): its partner's write
        position is kept with the events, and the statements waiting for its first save ride with them. A save
        that failed on a connection and was read back as not written is tried once more; an ambiguous one is
        not."""
        if not stored_events:
            return []
        save = self._save(stored_events, unit)
        if isinstance(save.error, (OperationalError, InterfaceError)) and not save.ambiguous:
            pause(0.2)
            save = self._save(stored_events, unit)
        if save.error is not None:
            raise save.error
        return save.notification_ids

    def _save(self, stored_events: Sequence[StoredEvent], unit: RequestWrites | None) -> PendingSave:
        """Queues one save of `unit` (with the statements waiting for its first save) and waits for it: on the
        event loop, by awaiting it there (`application.store.on_loop`), else by blocking the thread."""
        riding = unit.statements_for_next_save() if unit is not None else None
        save = PendingSave(stored_events, unit, statements=riding.statements if riding is not None else ())
        if riding is not None:
            save.on_done = riding.after
        self._ensure_committer()
        if on_loop():
            wait_for(self._awaited(save))
        else:
            self._queue.put(save)
            if not save.done.wait(SAVE_WAIT_LIMIT):
                save.fail(self._overdue(save, "this save"))
        return save

    async def _awaited(self, save: PendingSave) -> None:
        """Queues `save` and awaits it on the running loop, woken by the committer with no thread waiting."""
        settled = awaited_on(save, asyncio.get_running_loop())
        self._queue.put(save)
        try:
            await asyncio.wait_for(asyncio.shield(settled), SAVE_WAIT_LIMIT)
        except TimeoutError:
            save.fail(self._overdue(save, "this save"))

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
        (`application.store.group_commit.commit_watch.CommitProgress`)."""
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
            self._read_back.settle(pending, overran(use, fault), COMMIT_DEADLINE)
            return
        if written is None:  # written save by save, each settled there
            return
        saves, ids, kept = written
        self.batches_committed += 1
        start = 0
        for save in saves:
            save.succeed(ids[start : start + len(save.events)], position_kept=kept)
            start += len(save.events)


def overran(use: WatchedUse | None, fault: PersistenceError) -> PersistenceError:
    """The fault of a batch, saying so when the watch interrupted it; its cause stays the connection's own
    error (`read_back.may_have_committed` judges by it)."""
    if use is None or not use.interrupted:
        return fault
    overran = OperationalError(
        f"the database did not finish a batch within {use.seconds:g} s; its connection was replaced ({fault})"
    )
    overran.__cause__ = fault.__cause__
    return overran
