"""The callbacks of one API process: the outbox tables, the delivery worker, the body of a callback (the
`transaction` object as every endpoint presents it) and the list of deliveries the endpoint shows."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable

import msgspec
import psycopg
from psycopg_pool import ConnectionPool

from application.callbacks.delivery import EVENT_TYPE, DeliveryConfig, DeliveryWorker, Renderer
from application.callbacks.outbox import Delivery, DeliveryRecord, DeliveryStore
from application.callbacks.urls import CallbackUrlPolicy, SystemResolver
from application.settings import Settings
from domain.transaction import Transaction
from interface import presenters
from interface.schemas import callbacks as c
from projections.catalog import CALLBACK_OUTBOX
from projections.postgres import READ_SCHEMA
from projections.runner import open_view

ENCODER = msgspec.json.Encoder(decimal_format="number")
DDL_LOCK = int.from_bytes(hashlib.sha256(b"broker-ledger callback tables").digest()[:8], "big", signed=True)


def renderer(settings: Settings) -> Renderer:
    def render(delivery: Delivery, transaction: Transaction) -> bytes:
        return ENCODER.encode(
            c.CallbackEvent(
                id=delivery.event_id,
                type=EVENT_TYPE,
                created=delivery.created,
                transaction=presenters.transaction(settings, transaction).transaction,
            )
        )

    return render


def create_tables(url: str, schema: str = READ_SCHEMA, tries: int = 5) -> None:
    """The outbox projection's tables, created once by whichever process comes first (several workers start
    at once, and concurrent CREATE ... IF NOT EXISTS of one table can still collide)."""
    for attempt in range(tries):
        try:
            with psycopg.connect(url, autocommit=True) as conn:
                conn.execute("SELECT pg_advisory_lock(%s)", (DDL_LOCK,))
                try:
                    open_view(url, CALLBACK_OUTBOX, schema).datastore.close()
                finally:
                    conn.execute("SELECT pg_advisory_unlock(%s)", (DDL_LOCK,))
            return
        except psycopg.errors.UniqueViolation:  # a projection runner created them at the same moment
            if attempt == tries - 1:
                raise
            time.sleep(0.2)


class Callbacks:
    def __init__(
        self,
        settings: Settings,
        pool: ConnectionPool,
        database_url: str,
        secrets: Callable[[str], str],
        schema: str = READ_SCHEMA,
        config: DeliveryConfig | None = None,
    ) -> None:
        create_tables(database_url, schema)
        config = config or DeliveryConfig.from_env()
        policy = CallbackUrlPolicy(settings.callback_http_hosts, SystemResolver(config.timeout_seconds))
        self.store = DeliveryStore(pool, schema)
        self.worker = DeliveryWorker(self.store, policy, secrets, renderer(settings), config)

    def start(self) -> None:
        self.worker.start()

    def stop(self) -> None:
        self.worker.stop()


def deliveries(transaction_code: str, records: list[DeliveryRecord]) -> c.CallbackDeliveries:
    return c.CallbackDeliveries(
        transaction_code=transaction_code,
        deliveries=[
            c.CallbackDelivery(
                event_id=record.event_id,
                sequence=record.sequence,
                type=EVENT_TYPE,
                transaction_status=record.transaction_status,
                url=record.url,
                status=record.status,
                created=record.created,
                next_attempt_at=record.next_attempt_at,
                finished_at=record.finished_at,
                response_code=record.response_code,
                attempts=[
                    c.CallbackAttempt(
                        number=attempt.number,
                        at=attempt.at,
                        outcome=attempt.outcome,
                        response_code=attempt.response_code,
                        error=attempt.error,
                        duration_ms=attempt.duration_ms,
                    )
                    for attempt in record.attempts
                ],
            )
            for record in records
        ],
    )
