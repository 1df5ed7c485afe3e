"""The leases of Idempotency-Key claims, on their own (`interface.idempotency`, the store and its `Leases`),
with the lease shortened to a second so that the tests take seconds:

- a claim is renewed while its request runs, so a retry meanwhile is still 409, however long it runs;
- a claim whose owner died (nobody renews it) lapses, and the retry takes it over;
- a release that failed (the database was unreachable) is done later by the owner, so the retry need not
  wait for the lease to lapse.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import psycopg
import pytest
from psycopg_pool import ConnectionPool

from interface import idempotency
from interface.idempotency import IdempotencyStore
from interface.problems import ApiProblem
from tests.resilience.processes import PrivateCluster

LEASE = 1.0
RENEW = 0.2
FINGERPRINT = b"same request"


@pytest.fixture
def store(private_cluster: PrivateCluster, monkeypatch: pytest.MonkeyPatch) -> Iterator[IdempotencyStore]:
    monkeypatch.setattr(idempotency, "LEASE_SECONDS", LEASE)
    monkeypatch.setattr(idempotency, "RENEW_SECONDS", RENEW)
    url = private_cluster.create_database(f"leases_{uuid.uuid4().hex[:12]}")
    with ConnectionPool(url, min_size=1, max_size=4, open=True) as pool:
        store = IdempotencyStore(pool, "api")
        store.create_table()
        yield store


def claim_refused(store: IdempotencyStore, key: str) -> str:
    with pytest.raises(ApiProblem) as refused:
        store.claim("demo", key, FINGERPRINT)
    return refused.value.code


def test_a_running_claim_is_renewed_so_a_retry_waits_however_long_the_request_runs(
    store: IdempotencyStore,
) -> None:
    assert store.claim("demo", "slow", FINGERPRINT).owned
    time.sleep(2 * LEASE)
    assert claim_refused(store, "slow") == "idempotency_request_in_progress"
    store.leases.ended("demo", "slow")


def test_a_claim_nobody_renews_lapses_and_its_retry_takes_it_over(store: IdempotencyStore) -> None:
    claim = store.claim("demo", "orphan", FINGERPRINT)
    store.leases.ended("demo", "orphan")  # as if its process had been killed: nobody renews it any more
    assert claim_refused(store, "orphan") == "idempotency_request_in_progress"
    time.sleep(LEASE + 2 * RENEW)
    taken = store.claim("demo", "orphan", FINGERPRINT)
    assert taken.owned and taken.created != claim.created


def test_a_release_that_failed_is_done_once_the_database_answers_again(
    store: IdempotencyStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    claim = store.claim("demo", "unlucky", FINGERPRINT)
    forget = store.forget

    def unreachable(claims: list) -> None:
        raise psycopg.OperationalError("server closed the connection unexpectedly")

    monkeypatch.setattr(store, "forget", unreachable)
    store.release("demo", "unlucky", claim.created)  # does not raise: the release is kept for later
    assert claim_refused(store, "unlucky") == "idempotency_request_in_progress"
    monkeypatch.setattr(store, "forget", forget)
    deadline = time.monotonic() + LEASE / 2  # well before the lease could lapse
    while time.monotonic() < deadline:
        try:
            assert store.claim("demo", "unlucky", FINGERPRINT).owned
            return
        except ApiProblem:
            time.sleep(RENEW / 4)
    pytest.fail("the failed release was not done again within half a lease")
