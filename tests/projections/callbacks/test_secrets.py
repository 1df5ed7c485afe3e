"""The partners' signing secrets after a rotation, as the delivery worker signs with them: derived from the
service's key and a salt (no secret in the database), both signing during the overlap, the previous one
no more once the overlap is over, and a redelivery with an Idempotency-Key made once."""

from __future__ import annotations

import time
from typing import Any

import psycopg
import pytest
from psycopg_pool import ConnectionPool
from standardwebhooks.webhooks import WebhookVerificationError

from application.ledger import Ledger
from application.settings import Settings
from application.use_cases import UseCases
from interface.transactions.callback_bodies import renderer
from projections.callbacks.delivery import DeliveryWorker
from projections.callbacks.outbox import DeliveryStore
from projections.callbacks.projection import CallbackOutbox
from projections.callbacks.secrets import NO_ROTATION, SecretRotations, SigningSalts, SigningSecrets
from projections.callbacks.urls import CallbackUrlPolicy
from tests.projections.callbacks.support import FAST, SECRET, Trades, drain, listing, project
from tests.receivers import Received, Receiver, receiving

KEY = b"k" * 32


def test_a_rotated_secret_is_derived_from_the_key_and_its_salt_alone() -> None:
    signing = SigningSecrets(lambda partner: SECRET, KEY)
    assert signing.signing("demo", NO_ROTATION) == [SECRET]
    current, previous = signing.signing("demo", SigningSalts("a", ""))
    assert current.startswith("whsec_") and previous == SECRET
    assert signing.signing("demo", SigningSalts("a")) == [current]
    assert signing.signing("demo", SigningSalts("b", "a")) == [
        signing.signing("demo", SigningSalts("b"))[0],
        current,
    ]
    assert signing.signing("other", SigningSalts("a")) != [current]
    assert SigningSecrets(lambda partner: SECRET, b"x" * 32).signing("demo", SigningSalts("a")) != [current]


def test_the_database_keeps_no_secret(
    pool: ConnectionPool, outbox: CallbackOutbox, fresh_database: str
) -> None:
    rotated = SecretRotations(pool, "read", KEY, 60).rotate("demo")
    with psycopg.connect(fresh_database) as conn:
        rows = conn.execute("SELECT * FROM read.callback_secrets").fetchall()
    assert rows and all(rotated.secret not in str(row) for row in rows)


def sent(receiver: Receiver, store: DeliveryStore, code: str) -> list[Received]:
    ids = {record.event_id for record in listing(store, code)}
    return [item for item in receiver.snapshot() if item.event_id in ids]


def test_the_previous_secret_signs_until_the_overlaps_end_and_no_longer(
    store_ledger: Ledger,
    store_use_cases: UseCases,
    addresses: Any,
    outbox: CallbackOutbox,
    store: DeliveryStore,
    pool: ConnectionPool,
    settings: Settings,
) -> None:
    rotations = SecretRotations(pool, "read", KEY, overlap_seconds=1.0)
    new = rotations.rotate("demo").secret
    policy = CallbackUrlPolicy(settings.callback_http_hosts)
    signing = SigningSecrets(lambda partner: SECRET, KEY)
    worker = DeliveryWorker(store, policy, signing, renderer(settings), FAST)
    with receiving(Receiver()) as receiver:
        trades = Trades(store_use_cases, addresses)
        during = trades.buy(receiver.url)
        project(store_ledger, outbox)
        drain(worker, store, [during.code])
        for item in sent(receiver, store, during.code):
            assert len(item.headers["Webhook-Signature"].split(" ")) == 2
            item.verified(new), item.verified(SECRET)
        time.sleep(1.1)
        assert rotations.state("demo").previous_until is None
        after = trades.buy(receiver.url)
        project(store_ledger, outbox)
        drain(worker, store, [after.code])
        for item in sent(receiver, store, after.code):
            assert len(item.headers["Webhook-Signature"].split(" ")) == 1
            item.verified(new)
            with pytest.raises(WebhookVerificationError):
                item.verified(SECRET)


def test_a_redelivery_is_made_once_per_key_and_never_for_another_partner(
    store_ledger: Ledger,
    store_use_cases: UseCases,
    addresses: Any,
    outbox: CallbackOutbox,
    store: DeliveryStore,
    make_worker: Any,
) -> None:
    with receiving(Receiver()) as receiver:
        buy = Trades(store_use_cases, addresses).buy(receiver.url)
        project(store_ledger, outbox)
        drain(make_worker(), store, [buy.code])
        delivery = listing(store, buy.code)[0]  # Staged (Sending follows it)
        assert store.redeliver("other", delivery.event_id) is None
        assert store.redeliver("demo", "evt_nothing") is None
        again = store.redeliver("demo", delivery.event_id, "key-1")
        assert again is not None and again.status == "pending" and again.next_attempt_at is not None
        drain(make_worker(), store, [buy.code])
        assert store.redeliver("demo", delivery.event_id, "key-1").status == "delivered"  # type: ignore[union-attr]
        assert [item.event_id for item in receiver.snapshot()].count(delivery.event_id) == 2
        attempts = listing(store, buy.code)[0].attempts
        assert [attempt.number for attempt in attempts] == [1, 2]
