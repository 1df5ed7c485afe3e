"""The leases of Idempotency-Key claims, on their own (`interface.idempotency.keys`, the store and its
`Leases`),
with the lease shortened to a second so that the tests take seconds:

- a claim is renewed while its request runs, so a retry meanwhile is still 409, however long it runs;
- a claim whose owner died (nobody renews it) lapses, and the retry takes it over;
- a release that failed (the database was unreachable) is done later by the owner, so the retry need not
  wait for the lease to lapse.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import psycopg
import pytest
from anyio.from_thread import BlockingPortal, start_blocking_portal
from psycopg_pool import AsyncConnectionPool, ConnectionPool

from interface.http.problems import ApiProblem
from interface.idempotency import keys as idempotency
from interface.idempotency.keys import Claim, IdempotencyStore, StoredResponse
from tests.resilience.cluster import PrivateCluster

LEASE = 1.0
RENEW = 0.2
FINGERPRINT = b"same request"


@dataclass
class Keys:
    """The store, and an event loop (in a thread of its own) on which the tests claim keys as requests do."""

    store: IdempotencyStore
    loop: BlockingPortal

    def claim(self, key: str) -> Claim:
        return self.loop.call(self.store.claim, "demo", key, FINGERPRINT)


@pytest.fixture
def keys(private_cluster: PrivateCluster, monkeypatch: pytest.MonkeyPatch) -> Iterator[Keys]:
    monkeypatch.setattr(idempotency, "LEASE_SECONDS", LEASE)
    monkeypatch.setattr(idempotency, "RENEW_SECONDS", RENEW)
    url = private_cluster.create_database(f"leases_{uuid.uuid4().hex[:12]}")
    async_pool = AsyncConnectionPool(url, min_size=1, max_size=4, open=False, kwargs={"autocommit": True})
    with ConnectionPool(url, min_size=1, max_size=4, open=True) as pool, start_blocking_portal() as loop:
        loop.call(async_pool.open)
        store = IdempotencyStore(pool, "api", async_pool)
        store.create_table()
        try:
            yield Keys(store, loop)
        finally:
            loop.call(async_pool.close)


def claim_refused(keys: Keys, key: str) -> str:
    with pytest.raises(ApiProblem) as refused:
        keys.claim(key)
    return refused.value.code


def test_a_running_claim_is_renewed_so_a_retry_waits_however_long_the_request_runs(
    keys: Keys,
) -> None:
    assert keys.claim("slow").owned
    time.sleep(2 * LEASE)
    assert claim_refused(keys, "slow") == "idempotency_request_in_progress"
    keys.store.leases.ended("demo", "slow")


def test_a_claim_nobody_renews_lapses_and_its_retry_takes_it_over(keys: Keys) -> None:
    claim = keys.claim("orphan")
    keys.store.leases.ended("demo", "orphan")  # as if its process had been killed: nobody renews it any more
    assert claim_refused(keys, "orphan") == "idempotency_request_in_progress"
    time.sleep(LEASE + 2 * RENEW)
    taken = keys.claim("orphan")
    assert taken.owned and taken.created != claim.created


def test_a_release_that_failed_is_done_once_the_database_answers_again(
    keys: Keys, monkeypatch: pytest.MonkeyPatch
) -> None:
    claim = keys.claim("unlucky")
    forget = keys.store.forget

    def unreachable(claims: list) -> None:
        raise psycopg.OperationalError("server closed the connection unexpectedly")

    monkeypatch.setattr(keys.store, "forget", unreachable)
    keys.store.release("demo", "unlucky", claim.created)  # does not raise: the release is kept for later
    assert claim_refused(keys, "unlucky") == "idempotency_request_in_progress"
    monkeypatch.setattr(keys.store, "forget", forget)
    deadline = time.monotonic() + LEASE / 2  # well before the lease could lapse
    while time.monotonic() < deadline:
        try:
            assert keys.claim("unlucky").owned
            return
        except ApiProblem:
            time.sleep(RENEW / 4)
    pytest.fail("the failed release was not done again within half a lease")


def test_a_late_first_request_cannot_overwrite_the_answer_of_the_retry_that_took_its_key_over(
    keys: Keys,
) -> None:
    first = keys.claim("late")
    keys.store.leases.ended("demo", "late")  # the first request stalls: nobody renews its lease
    time.sleep(LEASE + 2 * RENEW)
    retry = keys.claim("late")
    retry_answer = StoredResponse(201, [], b"the retry's answer")
    assert keys.loop.call(keys.store.finish, "demo", "late", retry.created, retry_answer)

    stored_late = keys.loop.call(
        keys.store.finish, "demo", "late", first.created, StoredResponse(201, [], b"the first's answer")
    )

    assert not stored_late
    replay = keys.claim("late").replay
    assert replay is not None and replay.body == b"the retry's answer"


def test_a_renewal_skips_a_claim_being_answered_rather_than_wait_for_it(keys: Keys) -> None:
    """The renewal and a batch of answers lock the same claims: a renewal that waited for one, while
    holding others, deadlocked with the batch, and every answer of the process stalled a second."""
    answered, running = keys.claim("answered"), keys.claim("running")
    keys.store.leases.ended("demo", "answered")
    keys.store.leases.ended("demo", "running")
    lease_of = "SELECT lease_until FROM api.idempotency_keys WHERE partner = 'demo' AND key = %s"
    with keys.store.pool.connection() as answering, keys.store.pool.connection() as observer:
        answering.execute(  # an answer of "answered" in flight: its claim is locked until it commits
            "UPDATE api.idempotency_keys SET state = 'done' WHERE partner = 'demo' AND key = 'answered'"
        )
        before = observer.execute(lease_of, ["running"]).fetchone()[0]
        observer.commit()
        claims = [("demo", "answered", answered.created), ("demo", "running", running.created)]
        renewal = threading.Thread(target=keys.store.renew, args=(claims,), daemon=True)
        renewal.start()
        renewal.join(LEASE / 2)
        waited = renewal.is_alive()
        answering.rollback()
        assert not waited, "the renewal waited for the claim being answered"
        assert observer.execute(lease_of, ["running"]).fetchone()[0] > before
