"""Callback fixtures: the callback settings, the outbox view on the test's own database, and a delivery store
and workers on it (the parent conftest gives the database and a ledger writing to it)."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from psycopg_pool import ConnectionPool

from application.settings import Settings
from interface.transactions.callback_bodies import renderer
from projections.base.runner import open_view
from projections.callbacks.delivery import DeliveryConfig, DeliveryWorker
from projections.callbacks.outbox import DeliveryStore
from projections.callbacks.projection import CallbackOutbox
from projections.callbacks.urls import CallbackUrlPolicy
from projections.catalog import CALLBACK_OUTBOX
from tests.projections.callbacks.support import FAST, SECRET, callback_settings


@pytest.fixture
def settings() -> Settings:
    return callback_settings()


@pytest.fixture
def outbox(fresh_database: str) -> Iterator[CallbackOutbox]:
    view = open_view(fresh_database, CALLBACK_OUTBOX)
    yield view  # type: ignore[misc]
    view.datastore.close()


@pytest.fixture
def pool(fresh_database: str) -> Iterator[ConnectionPool]:
    with ConnectionPool(fresh_database, min_size=1, max_size=12, open=True) as opened:
        yield opened


@pytest.fixture
def store(pool: ConnectionPool, outbox: CallbackOutbox) -> DeliveryStore:
    return DeliveryStore(pool, "read")


@pytest.fixture
def make_worker(store: DeliveryStore, settings: Settings) -> Iterator[Callable[..., DeliveryWorker]]:
    made: list[DeliveryWorker] = []

    def make(config: DeliveryConfig = FAST, policy: CallbackUrlPolicy | None = None) -> DeliveryWorker:
        policy = policy or CallbackUrlPolicy(settings.callback_http_hosts)
        worker = DeliveryWorker(store, policy, lambda partner: SECRET, renderer(settings), config)
        made.append(worker)
        return worker

    yield make
    for worker in made:
        worker.stop()
