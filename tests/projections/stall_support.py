"""An event the ReadModels projection cannot apply, put into the event store as a faulty writer would: a
`Transaction.Committed` of an unknown transaction with nothing in it but a timestamp (no `at`); and what the
tests of running projections wait for and read: the head of the log, the failures on record."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime

import psycopg
import pytest
from eventsourcing.persistence import StoredEvent
from eventsourcing.utils import get_topic

from application.store.database import eventsourcing_env
from application.store.log import EVENTS_SCHEMA, LedgerLog
from domain.transaction import Transaction
from projections import status
from projections.audit_sql import small_pool
from tests.projections.audit_support import query


def log_app(url: str) -> LedgerLog:
    """The event log, its tables not created again (running projections may be creating theirs meanwhile:
    two CREATE OR REPLACE of one function at once fail with "tuple concurrently updated")."""
    return LedgerLog(env={**small_pool(eventsourcing_env(url, EVENTS_SCHEMA)), "CREATE_TABLE": "no"})


def insert_unappliable_event(url: str) -> int:
    """Records the event; its notification id."""
    app = log_app(url)
    try:
        state = app.mapper.transcoder.encode({"timestamp": datetime.now(UTC)})
        topic = get_topic(Transaction.Committed)
        app.recorder.insert_events([StoredEvent(uuid.uuid4(), 1, topic, state)])
        return app.recorder.max_notification_id()
    finally:
        app.close()


def eventually(condition: Callable[[], object], seconds: float = 20) -> None:
    """Waits until `condition()` holds (a running worker's doing), failing the test after `seconds`."""
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail("condition not met in time")
        time.sleep(0.05)


def head_of(url: str) -> int:
    return query(url, "SELECT max(notification_id) AS n FROM ledger.ledger_events")[0]["n"]


def failures(url: str) -> dict[str, status.Failure]:
    with psycopg.connect(url, autocommit=True) as conn:
        return status.failures(conn)
