"""The event store's reads: what a use case reads ahead in one round trip, and reads that fail fast.

`ReadAheadQueries` is mixed into the group-commit recorder (`application.store.group_commit`), so the use
cases' read-ahead (`LedgerStore.loading`) reads with it:
- `select_events_of(ids, snapshots_table)`: several aggregates' events in one round trip, in version order per
  aggregate, each from its latest snapshot on when it has one.
- `select_histories_and_latest_of(ids, latest_ids, snapshots_table)`: the same for `ids`, and of each of
  `latest_ids` only its latest event (a limit window is built from its last event, which carries its total).
- The library's own reads (`select_events`, `select_notifications`, `max_notification_id`) tried twice, not
  ten times (`fail_fast`): a request learns within one timeout that the store cannot be read.

`notifications_page` is the projections' read of a page of the log, on either recorder (this one, or the
library's with group commit off): rows read as tuples, since a page of a rebuild is thousands of rows.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any
from uuid import UUID

from eventsourcing.persistence import InterfaceError, Notification, OperationalError, StoredEvent
from eventsourcing.postgres import PostgresApplicationRecorder
from psycopg.rows import tuple_row
from psycopg.sql import SQL, Identifier
from psycopg_pool import AsyncConnectionPool

from application.store.binary_arrays import UUIDArray
from application.store.loop_reads import LoopReads
from application.store.on_loop import on_loop, pause, wait_for

REFUSED_BEFORE_COMMIT = frozenset({"55P03", "57014"})  # lock_not_available, query_canceled (a timeout)
# Aggregates' histories, each from its latest snapshot (if it has one) on, for several aggregates at once.
# (`{marked}` is empty, or the column that tells a history's rows from latest events, below.)
_HISTORIES = """
WITH snapshot AS (
    SELECT DISTINCT ON (originator_id) originator_id, originator_version, topic, state
    FROM {schema}.{snapshots} WHERE originator_id = ANY(%(ids)b)
    ORDER BY originator_id, originator_version DESC
)
SELECT {marked}originator_id, originator_version, topic, state FROM snapshot
UNION ALL
SELECT {marked}e.originator_id, e.originator_version, e.topic, e.state
FROM {schema}.{events} e LEFT JOIN snapshot s USING (originator_id)
WHERE e.originator_id = ANY(%(ids)b) AND e.originator_version > coalesce(s.originator_version, 0)
"""
# The same, and for other aggregates only their latest event: one backward step on the primary key each,
# however long their histories.
_LATEST = """UNION ALL
SELECT {marked}last.originator_id, last.originator_version, last.topic, last.state
FROM unnest(%(latest_ids)b) AS wanted (originator_id) CROSS JOIN LATERAL (
    SELECT originator_id, originator_version, topic, state FROM {schema}.{events}
    WHERE originator_id = wanted.originator_id ORDER BY originator_version DESC LIMIT 1
) last
"""
SINCE_SNAPSHOT = _HISTORIES.replace("{marked}", "") + "ORDER BY 1, 2\n"
HISTORIES_AND_LATEST = (_HISTORIES + _LATEST).replace("{marked}", "") + "ORDER BY 1, 2\n"
# Both, for the read-aheads of several use cases at once (`application.store.loop_reads`): each row marked
# as a history's (false) or a latest event (true), as one aggregate may be either for two use cases.
MARKED_HISTORIES_AND_LATEST = (
    _HISTORIES.replace("{marked}", "false, ") + _LATEST.replace("{marked}", "true, ") + "ORDER BY 2, 3\n"
)
SELECT_PAGE = SQL(
    "SELECT originator_id, originator_version, topic, state, notification_id FROM {}"
    " WHERE notification_id >= %(start)s{} ORDER BY notification_id LIMIT %(limit)s"
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
        pause(0.2)
        return method(*args, **kwargs)

    return read


class ReadAheadQueries(PostgresApplicationRecorder):
    """The read side of the ledger's recorder (see the module docstring)."""

    select_events_of_statement: str
    # the event loop's connections, for use cases run on the loop (`application.store.on_loop`): their
    # read-aheads are awaited there, together (`LoopReads`), rather than blocking the loop's thread (given
    # by the app, `read_on_loop`; None: every read-ahead on the datastore's pool)
    loop_pool: AsyncConnectionPool | None = None
    _loop_reads: dict[str, LoopReads]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.select_events_of_statement = (
            SQL(
                "SELECT originator_id, originator_version, topic, state FROM {schema}.{table}"
                " WHERE originator_id = ANY(%(ids)b) ORDER BY originator_id, originator_version"
            )
            .format(schema=Identifier(self.datastore.schema), table=Identifier(self.events_table_name))
            .as_string()
        )
        self._loop_reads = {}

    def read_on_loop(self, pool: AsyncConnectionPool) -> None:
        """From now on, the read-aheads of use cases on the event loop are read on `pool`, together."""
        self.loop_pool = pool

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
        if snapshots_table is not None and self._on_loop():
            return wait_for(self._loop_reads_of(snapshots_table).read(originator_ids, ()))
        statement = self.select_events_of_statement
        if snapshots_table is not None:
            statement = _on_tables(
                SINCE_SNAPSHOT, self.datastore.schema, self.events_table_name, snapshots_table
            )
        return self._stored_events(statement, {"ids": UUIDArray(originator_ids)})

    @fail_fast
    def select_histories_and_latest_of(
        self, originator_ids: Sequence[UUID], latest_ids: Sequence[UUID], snapshots_table: str
    ) -> list[StoredEvent]:
        """In one round trip, the events of `originator_ids` as `select_events_of` reads them with
        `snapshots_table`, and of each of `latest_ids` (ids not among `originator_ids`) only its latest
        event; in version order per aggregate."""
        if self._on_loop():
            return wait_for(self._loop_reads_of(snapshots_table).read(originator_ids, latest_ids))
        statement = _on_tables(
            HISTORIES_AND_LATEST, self.datastore.schema, self.events_table_name, snapshots_table
        )
        return self._stored_events(
            statement, {"ids": UUIDArray(originator_ids), "latest_ids": UUIDArray(latest_ids)}
        )

    def _on_loop(self) -> bool:
        """True for a read of a use case on the event loop, when the app gave the loop's connections."""
        return self.loop_pool is not None and on_loop()

    def _loop_reads_of(self, snapshots_table: str) -> LoopReads:
        reads = self._loop_reads.get(snapshots_table)
        if reads is None:
            assert self.loop_pool is not None
            statement = _on_tables(
                MARKED_HISTORIES_AND_LATEST, self.datastore.schema, self.events_table_name, snapshots_table
            )
            reads = self._loop_reads[snapshots_table] = LoopReads(self.loop_pool, statement)
        return reads

    def _stored_events(self, statement: str, params: dict[str, Any]) -> list[StoredEvent]:
        """The stored events a read-ahead `statement` selects, in one round trip."""
        with self.datastore.get_connection() as conn, conn.cursor(row_factory=tuple_row) as curs:
            curs.execute(statement, params, prepare=True)
            rows = curs.fetchall()
        return [StoredEvent(id_, version, topic, bytes(state)) for id_, version, topic, state in rows]


@functools.cache
def _on_tables(template: str, schema: str, events_table: str, snapshots_table: str) -> str:
    """A read-ahead `template` naming these tables, composed once for each."""
    return (
        SQL(template)
        .format(
            schema=Identifier(schema), events=Identifier(events_table), snapshots=Identifier(snapshots_table)
        )
        .as_string()
    )


def notifications_page(
    recorder: PostgresApplicationRecorder, start: int, limit: int, stop: int | None
) -> list[Notification]:
    """The stored events from notification id `start` on (up to `stop`), at most `limit`: the library's
    `select_notifications`, with rows read as tuples (a page of a rebuild is thousands of rows)."""
    table = Identifier(recorder.datastore.schema, recorder.events_table_name)
    statement = SELECT_PAGE.format(
        table, SQL("") if stop is None else SQL(" AND notification_id <= %(stop)s")
    )
    with recorder.datastore.get_connection() as conn, conn.cursor(row_factory=tuple_row) as curs:
        rows = curs.execute(statement, {"start": start, "stop": stop, "limit": limit}).fetchall()
    return [
        Notification(originator_id, version, topic, bytes(state), id_)
        for originator_id, version, topic, state, id_ in rows
    ]
