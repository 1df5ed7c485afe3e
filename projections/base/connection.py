"""One connection per running projection: it holds the projection's advisory lock, LISTENs for new events,
and is lent to the datastores of the projection's view and of the event log it reads, in place of their pools.

A projection works in one thread, one step at a time (read a page, write it, wait for NOTIFY), so one
connection serves all of it; a process running P projections holds P connections while it runs them. Its
statements have `PROJECTION_TIMEOUTS` (a page is a larger statement than an API read): one blocked longer
fails the page, which the runner records and retries (`projections.status`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
from eventsourcing.postgres import PostgresDatastore
from psycopg.rows import DictRow, dict_row

from application.store.database import PROJECTION_TIMEOUTS, tagged, with_timeouts
from application.store.hung_servers import TrackedConnection


class LentConnection:
    """Stands in for a datastore's pool (`open`, `connection`, `close`), lending the same connection every
    time; the connection is its lender's, who closes it."""

    def __init__(self, connection: psycopg.Connection[DictRow]) -> None:
        self._connection = connection

    def open(self, wait: bool = False, timeout: float = 30.0) -> None:
        pass

    @contextmanager
    def connection(self, timeout: float | None = None) -> Iterator[psycopg.Connection[DictRow]]:
        yield self._connection

    def close(self, timeout: float = 5.0) -> None:
        pass


@contextmanager
def locked(url: str, key: int, name: str) -> Iterator[psycopg.Connection[DictRow] | None]:
    """A connection (autocommit, dict rows, as eventsourcing's; `broker-ledger <name>` in pg_stat_activity)
    holding advisory lock `key` while inside, or None when another session holds the lock."""
    with connect(url, name) as connection:
        if not try_lock(connection, key):
            yield None
            return
        try:
            yield connection
        finally:
            unlock(connection, key)


def connect(url: str, name: str) -> psycopg.Connection[DictRow]:
    """A projection's connection: autocommit, dict rows (as eventsourcing's), `PROJECTION_TIMEOUTS`,
    `broker-ledger <name>` in pg_stat_activity, cut if its server hangs (`application.store.hung_servers`)."""
    conninfo = with_timeouts(tagged(url, name), PROJECTION_TIMEOUTS)
    return TrackedConnection.connect(conninfo, autocommit=True, row_factory=dict_row)


def try_lock(connection: psycopg.Connection[DictRow], key: int) -> bool:
    """Takes advisory lock `key` for `connection`'s session if no other session holds it."""
    row = connection.execute("SELECT pg_try_advisory_lock(%s) AS free", (key,)).fetchone()
    return bool(row and row["free"])


def unlock(connection: psycopg.Connection[Any], key: int) -> None:
    """Releases advisory lock `key` of `connection`'s session while the connection can still take a
    statement; a closed or broken one has released it with its session."""
    if not connection.closed and connection.info.transaction_status == psycopg.pq.TransactionStatus.IDLE:
        with contextlib.suppress(psycopg.Error):
            connection.execute("SELECT pg_advisory_unlock(%s)", (key,))


def lend(connection: psycopg.Connection[DictRow], *datastores: PostgresDatastore) -> None:
    """Has `datastores` use `connection` from now on; the pools they had are closed."""
    for datastore in datastores:
        datastore.after_connect_func()(connection)  # autocommit, the idle-in-transaction timeout
        pool: Any = datastore.pool
        datastore.pool = LentConnection(connection)  # type: ignore[assignment]
        pool.close()
