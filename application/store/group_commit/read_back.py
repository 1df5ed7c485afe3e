"""What the group committer (`application.store.group_commit`) does with a batch whose connection failed.

The batch may or may not have committed: COMMIT may have reached the server before the connection was lost, or
before the watch interrupted a batch that overran its deadline
(`application.store.group_commit.commit_watch`). The events it sent are read back on another connection: the
saves found there, byte for byte, succeed with their notification ids; the others fail with the connection's
error (and are tried once more by their request). So a landed save is never retried into a version conflict (a
409 for a write that happened). Only if the read back itself fails does a save fail as *ambiguous*, and it is
not retried. A companion's statements cannot be read back: it fails as one that may have run. A batch that
surely did not commit (no connection was had, or the server refused a statement before COMMIT) fails without a
read back.
"""

from __future__ import annotations

import time
from typing import Any
from uuid import UUID

from eventsourcing.persistence import InterfaceError, OperationalError
from eventsourcing.postgres import PostgresDatastore
from psycopg_pool import PoolTimeout

from application.store.group_commit.commit_watch import CommitWatch
from application.store.group_commit.types import PendingSave
from application.store.read_ahead import REFUSED_BEFORE_COMMIT

READ_BACK_ATTEMPTS = (0.0, 0.2, 1.0)  # delays before each try at reading back a batch after a fault
Found = dict[tuple[UUID, int, bytes], int]  # notification ids by (originator id, version, state)


class ReadBack:
    """Settles a batch after a connection fault by what the store holds (see the module docstring); each try
    at reading back holds its connection at most as long as a batch may."""

    def __init__(self, datastore: PostgresDatastore, statement: str, watch: CommitWatch) -> None:
        self.datastore = datastore
        self.statement = statement  # the events of some originators: id, version, state, notification id
        self.watch = watch

    def settle(self, batch: list[PendingSave], fault: BaseException, deadline: float) -> None:
        """The saves whose events are in the store succeed, the others fail with `fault`."""
        if not may_have_committed(fault):
            for save in batch:
                save.fail(fault)
            return
        found = self._found(batch, deadline)
        if found is None:
            for save in batch:
                save.ambiguous = True
                save.fail(fault)
            return
        for save in batch:  # a companion's statements cannot be read back: it fails, as one that may have run
            keys = [(event.originator_id, event.originator_version, event.state) for event in save.events]
            if keys and all(key in found for key in keys):
                save.succeed([found[key] for key in keys])
            else:
                save.ambiguous = save.ambiguous or not keys
                save.fail(fault)

    def _found(self, batch: list[PendingSave], deadline: float) -> Found | None:
        """The notification ids of the batch's events as stored now, keyed by (originator id, version,
        state): the same bytes, so another writer's events at those versions do not count. None if the
        store cannot be read."""
        originator_ids = list({event.originator_id for save in batch for event in save.events})
        if not originator_ids:
            return {}
        for delay in READ_BACK_ATTEMPTS:
            time.sleep(delay)
            try:
                rows = self._rows(originator_ids, deadline)
            except (OperationalError, InterfaceError):
                continue
            return {
                (row["originator_id"], row["originator_version"], bytes(row["state"])): row["notification_id"]
                for row in rows
            }
        return None

    def _rows(self, originator_ids: list[UUID], deadline: float) -> list[Any]:
        with (
            self.datastore.get_connection() as conn,
            self.watch.watching(conn, deadline),
            conn.cursor() as curs,
        ):
            curs.execute(self.statement, {"ids": originator_ids})
            return curs.fetchall()


def may_have_committed(fault: BaseException) -> bool:
    """False when the batch surely did not commit: no connection was had, or the server refused a statement
    before COMMIT (a lock or statement timeout)."""
    cause = fault.__cause__
    if isinstance(cause, PoolTimeout):
        return False
    return getattr(cause, "sqlstate", None) not in REFUSED_BEFORE_COMMIT
