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
  returned is on disk. If the connection fails, every waiter of that batch gets the error; whether or not
  the commit reached the server, a retry cannot write twice (its versions would conflict).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any
from uuid import UUID

import psycopg
from eventsourcing.persistence import (
    IntegrityError,
    InterfaceError,
    Notification,
    OperationalError,
    StoredEvent,
)
from eventsourcing.postgres import PostgresApplicationRecorder, PostgresDatastore
from eventsourcing.utils import retry
from psycopg import Connection
from psycopg.pq import TransactionStatus
from psycopg.rows import DictRow
from psycopg.sql import SQL, Composed, Identifier

BEGIN = SQL("BEGIN")
COMMIT = SQL("COMMIT")
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
MAX_BATCH_EVENTS = 2000  # events per transaction; a larger queue is written in several batches
# The library retries each call 10 times, each waiting up to the pool's timeout for a connection: 50 s
# before a request learns the database is down. Twice is enough to replace a connection that died.
fail_fast = retry((InterfaceError, OperationalError), max_attempts=2, wait=0.2)


class PendingSave:
    """One save waiting for the committer: its events, then its notification ids or its error."""

    __slots__ = ("done", "error", "events", "notification_ids")

    def __init__(self, events: Sequence[StoredEvent]) -> None:
        self.events = events
        self.notification_ids: list[int] = []
        self.error: BaseException | None = None
        self.done = threading.Event()

    def succeed(self, notification_ids: list[int]) -> None:
        self.notification_ids = notification_ids
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


class GroupCommitRecorder(PostgresApplicationRecorder):
    """An application recorder whose concurrent saves share transactions (see the module docstring)."""

    def __init__(self, datastore: PostgresDatastore, *, events_table_name: str = "stored_events") -> None:
        super().__init__(datastore, events_table_name=events_table_name)
        self.insert_keyed_statement = SQL(
            "INSERT INTO {schema}.{table} (originator_id, originator_version, topic, state)"
            " SELECT originator_id, originator_version, topic, state"
            " FROM unnest(%b::uuid[], %b::bigint[], %b::text[], %b::bytea[]) WITH ORDINALITY"
            " AS e (originator_id, originator_version, topic, state, ordinality)"
            " ORDER BY e.ordinality"
            " RETURNING notification_id"
        ).format(schema=Identifier(self.datastore.schema), table=Identifier(self.events_table_name))
        self.notify_statement = SQL("NOTIFY {0}").format(Identifier(self.channel_name))
        self.select_events_of_statement = SQL(
            "SELECT originator_id, originator_version, topic, state FROM {schema}.{table}"
            " WHERE originator_id = ANY(%(ids)s) ORDER BY originator_id, originator_version"
        ).format(schema=Identifier(self.datastore.schema), table=Identifier(self.events_table_name))
        self._since_snapshot_statements: dict[str, Composed] = {}
        self._queue = SaveQueue()
        self._committer: threading.Thread | None = None
        self._starting = threading.Lock()
        self.batches_committed = 0  # for tests and benchmarks: how many transactions carried the saves

    @fail_fast
    def insert_events(self, stored_events: Sequence[StoredEvent], **kwargs: Any) -> Sequence[int] | None:
        if not stored_events:
            return []
        save = PendingSave(stored_events)
        self._ensure_committer()
        self._queue.put(save)
        save.done.wait()
        if save.error is not None:
            raise save.error
        return save.notification_ids

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
        with self.datastore.get_connection() as conn, conn.cursor() as curs:
            curs.execute(statement, {"ids": list(originator_ids)}, prepare=True)
            rows = curs.fetchall()
        return [
            StoredEvent(row["originator_id"], row["originator_version"], row["topic"], bytes(row["state"]))
            for row in rows
        ]

    def _since_snapshot_statement(self, snapshots_table: str) -> Composed:
        statement = self._since_snapshot_statements.get(snapshots_table)
        if statement is None:
            statement = SQL(SINCE_SNAPSHOT).format(
                schema=Identifier(self.datastore.schema),
                events=Identifier(self.events_table_name),
                snapshots=Identifier(snapshots_table),
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
        with self.datastore.get_connection() as conn:
            try:
                ids = self._write_together(conn, batch)
            except psycopg.errors.UniqueViolation:
                self._write_one_by_one(conn, batch)
                return
        self.batches_committed += 1
        start = 0
        for save in batch:
            save.succeed(ids[start : start + len(save.events)])
            start += len(save.events)

    def _write_together(self, conn: Connection[DictRow], batch: list[PendingSave]) -> list[int]:
        """One round trip: BEGIN, lock, NOTIFY, INSERT ... RETURNING and COMMIT, pipelined."""
        columns = _columns([event for save in batch for event in save.events])
        try:
            with conn.cursor() as control, conn.cursor() as insert, conn.pipeline() as pipeline:
                control.execute(BEGIN)
                self._lock_table(control)
                control.execute(self.notify_statement)
                insert.execute(self.insert_keyed_statement, columns, prepare=True, binary=True)
                control.execute(COMMIT)
                pipeline.sync()
                ids = [row["notification_id"] for row in insert.fetchall()]
        except BaseException:
            if conn.info.transaction_status != TransactionStatus.IDLE:
                conn.rollback()
            raise
        if len(ids) != len(columns[0]):
            raise OperationalError(f"inserted {len(columns[0])} events but got {len(ids)} notification ids")
        return ids

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
                except psycopg.errors.UniqueViolation as conflict:
                    outcomes.append((save, IntegrityError(str(conflict))))
        self.batches_committed += 1
        for save, outcome in outcomes:  # only now, after COMMIT
            if isinstance(outcome, BaseException):
                save.fail(outcome)
            else:
                save.succeed(outcome)


def _columns(events: Sequence[StoredEvent]) -> tuple[list[UUID], list[int], list[str], list[bytes]]:
    """The events as four arrays, which psycopg sends far faster than an array of composite values (and,
    as `%b` parameters, in binary: the states as they are, not escaped as text)."""
    return (
        [event.originator_id for event in events],
        [event.originator_version for event in events],
        [event.topic for event in events],
        [event.state for event in events],
    )
