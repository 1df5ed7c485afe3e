"""The callbacks of one API process: the outbox tables made sure of, the delivery worker (started and stopped
with the process), the store the deliveries are listed and redelivered through, and the partners' secret
rotations."""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Callable, Iterable

import psycopg
from psycopg_pool import ConnectionPool

from projections.base.postgres import READ_SCHEMA
from projections.base.runner import open_view
from projections.callbacks.delivery import DeliveryWorker, Renderer
from projections.callbacks.delivery_config import DeliveryConfig
from projections.callbacks.outbox import DeliveryStore
from projections.callbacks.projection import CALLBACK_OUTBOX
from projections.callbacks.secrets import SecretRotations, SigningSecrets
from projections.callbacks.urls import CallbackUrlPolicy, SystemResolver

DDL_LOCK = int.from_bytes(hashlib.sha256(b"broker-ledger callback tables").digest()[:8], "big", signed=True)


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
        pool: ConnectionPool,
        database_url: str,
        secrets: Callable[[str], str],
        render: Renderer,
        http_hosts: Iterable[str] = (),
        schema: str = READ_SCHEMA,
        config: DeliveryConfig | None = None,
        secret_key: bytes | None = None,
    ) -> None:
        """`secrets` gives a partner's configured callback secret, `render` a delivery's body (the
        interface's presenter), `http_hosts` the hosts that may receive plain http (`callback_http_hosts`),
        `secret_key` the key rotated secrets are derived from (the same in every process of the service;
        one made here when none is given, good for this process alone)."""
        create_tables(database_url, schema)
        config = config or DeliveryConfig()  # the composition root hands in the environment's
        policy = CallbackUrlPolicy(http_hosts, SystemResolver(config.timeout_seconds))
        key = secret_key or os.urandom(32)
        self.store = DeliveryStore(pool, schema)
        self.rotations = SecretRotations(pool, schema, key, config.signing_overlap_seconds)
        signing = SigningSecrets(secrets, key)
        self.worker = DeliveryWorker(self.store, policy, signing, render, config)

    def start(self) -> None:
        self.worker.start()

    def stop(self) -> None:
        self.worker.stop()
