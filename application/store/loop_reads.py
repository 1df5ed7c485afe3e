"""`LoopReads`: the read-aheads of use cases run on the event loop (`application.store.on_loop`), sent to the
database together.

A use case in a worker thread held a connection of the event store's pool for its read-ahead's round trip and
gave it back at once. On the loop, a connection would be held from the query's send until the loop came back
to the request that awaited it, and with every request's work on that one thread that is most of the time:
a few connections would serve a few hundred read-aheads a second. So the read-aheads waiting at one moment go
as one statement (`StatementBatches`): the union of their aggregates, each row marked as part of a history
(from the aggregate's latest snapshot on) or as an aggregate's latest event, and each use case gets the rows
of the aggregates it named, as its own read-ahead would have read them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any
from uuid import UUID

import psycopg
from eventsourcing.persistence import InterfaceError, OperationalError, PersistenceError, StoredEvent
from psycopg.rows import tuple_row
from psycopg_pool import AsyncConnectionPool

from application.store.binary_arrays import UUIDArray
from application.store.statement_batches import StatementBatches

# one use case's read-ahead: the aggregates whose histories it reads, and those of which only the latest event
Reads = tuple[Sequence[UUID], Sequence[UUID]]


class LoopReads:
    """Read-aheads on `pool`'s async connections with `statement` (`read_ahead.MARKED_HISTORIES_AND_LATEST` on
    the recorder's tables: parameters `ids` and `latest_ids`, rows (latest, id, version, topic, state))."""

    def __init__(self, pool: AsyncConnectionPool, statement: str) -> None:
        self.pool = pool
        self.statement = statement
        self._batches: StatementBatches[Reads, list[StoredEvent]] = StatementBatches(self._read, key=id)

    async def read(self, ids: Sequence[UUID], latest_ids: Sequence[UUID]) -> list[StoredEvent]:
        """The events of `ids` (from their latest snapshot on) and the latest of each of `latest_ids`, in
        version order per aggregate, read with the read-aheads waiting beside it."""
        return await self._batches.submit((ids, latest_ids))

    async def _read(self, batch: list[Reads]) -> list[list[StoredEvent]]:
        ids = list(dict.fromkeys(aggregate for reads, _ in batch for aggregate in reads))
        latest_ids = list(dict.fromkeys(aggregate for _, latest in batch for aggregate in latest))
        rows = await self._rows({"ids": UUIDArray(ids), "latest_ids": UUIDArray(latest_ids)})
        histories: dict[UUID, list[StoredEvent]] = {}
        latest: dict[UUID, StoredEvent] = {}
        for is_latest, originator_id, version, topic, state in rows:
            stored = StoredEvent(originator_id, version, topic, bytes(state))
            if is_latest:
                latest[originator_id] = stored
            else:
                histories.setdefault(originator_id, []).append(stored)
        return [_events_of(reads, latest_reads, histories, latest) for reads, latest_reads in batch]

    async def _rows(self, params: dict[str, Any]) -> list[tuple]:
        """The statement's rows, psycopg's errors as the library's (as the datastore's connections raise
        them)."""
        try:
            async with self.pool.connection() as conn, conn.cursor(row_factory=tuple_row) as curs:
                await curs.execute(self.statement, params, prepare=True)
                return await curs.fetchall()
        except psycopg.InterfaceError as error:
            raise InterfaceError(str(error)) from error
        except psycopg.OperationalError as error:
            raise OperationalError(str(error)) from error
        except psycopg.Error as error:
            raise PersistenceError(str(error)) from error


def _events_of(
    ids: Sequence[UUID],
    latest_ids: Sequence[UUID],
    histories: dict[UUID, list[StoredEvent]],
    latest: dict[UUID, StoredEvent],
) -> list[StoredEvent]:
    events = [stored for aggregate in ids for stored in histories.get(aggregate, ())]
    events += [latest[aggregate] for aggregate in latest_ids if aggregate in latest]
    return events
