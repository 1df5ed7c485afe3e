"""An event the ReadModels projection cannot apply, put into the event store as a faulty writer would: a
`Transaction.Committed` of an unknown transaction with nothing in it but a timestamp (no `at`)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

from eventsourcing.persistence import StoredEvent
from eventsourcing.utils import get_topic

from application.store.database import eventsourcing_env
from application.store.log import EVENTS_SCHEMA, LedgerLog
from domain.transaction import Transaction
from projections.audit_sql import small_pool


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
