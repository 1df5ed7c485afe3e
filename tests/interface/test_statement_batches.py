"""Concurrent requests' claims and answers of Idempotency-Keys share statements (`StatementBatches`), and
each key keeps its own outcome: the batching on its own, then the store's batches on PostgreSQL."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from datetime import timedelta

import psycopg
import pytest
from anyio.from_thread import BlockingPortal, start_blocking_portal
from psycopg_pool import AsyncConnectionPool, ConnectionPool

from application.store.database import ensure_schema, eventsourcing_env
from application.store.log import LedgerLog
from application.store.statement_batches import StatementBatches
from interface.http.problems import ApiProblem
from interface.idempotency.keys import IdempotencyStore, StoredResponse


class Refused(Exception):
    pass


class Recorder:
    """A batch runner that records its batches; refuses the batch holding "bad", fails on "down"."""

    def __init__(self) -> None:
        self.batches: list[list[str]] = []

    async def __call__(self, items: list[str]) -> list[str]:
        self.batches.append(list(items))
        await asyncio.sleep(0)
        if "down" in items:
            raise ConnectionError("the database is unreachable")
        if "bad" in items:
            raise Refused("bad data")
        return [item.upper() for item in items]


def batches_of(items: list[str]) -> tuple[list[object], list[list[str]]]:
    recorder = Recorder()
    batches = StatementBatches(recorder, key=lambda item: item.split("#")[0], split_on=(Refused,))

    async def submit_all() -> list[object]:
        return await asyncio.gather(*(batches.submit(item) for item in items), return_exceptions=True)

    return asyncio.run(submit_all()), recorder.batches


def test_concurrent_items_share_one_batch_and_each_gets_its_own_outcome():
    outcomes, batches = batches_of(["a", "b", "c"])
    assert outcomes == ["A", "B", "C"]
    assert batches == [["a", "b", "c"]]


def test_items_of_one_key_never_share_a_batch_and_keep_their_order():
    outcomes, batches = batches_of(["a#1", "b", "a#2"])
    assert outcomes == ["A#1", "B", "A#2"]
    assert batches == [["a#1", "b"], ["a#2"]]


def test_an_item_refused_for_its_data_fails_only_its_own_request():
    outcomes, batches = batches_of(["a", "bad", "c"])
    assert outcomes[0] == "A" and outcomes[2] == "C"
    assert isinstance(outcomes[1], Refused)
    assert batches == [["a", "bad", "c"], ["a"], ["bad"], ["c"]]


def test_an_unreachable_database_fails_the_batch_at_once_without_trying_each_item():
    outcomes, batches = batches_of(["a", "down", "c"])
    assert all(isinstance(outcome, ConnectionError) for outcome in outcomes)
    assert batches == [["a", "down", "c"]]


def test_a_lone_item_runs_alone_and_a_later_one_in_a_batch_of_its_own():
    recorder = Recorder()
    batches = StatementBatches(recorder, key=lambda item: item)

    async def one_then_another() -> list[str]:
        return [await batches.submit("a"), await batches.submit("b")]

    assert asyncio.run(one_then_another()) == ["A", "B"]
    assert recorder.batches == [["a"], ["b"]]


# --- the store's batches on PostgreSQL ------------------------------------------------------------------


@pytest.fixture(params=["in the event store's transactions", "on the async pool"])
def store(
    request: pytest.FixtureRequest, database_url: str
) -> Iterator[tuple[IdempotencyStore, BlockingPortal]]:
    """The keys' table, its claims and answers written as the service writes them (riding in the group
    committer's transactions) or, as with the library's recorder, on the async pool."""
    async_pool = AsyncConnectionPool(
        database_url, min_size=1, max_size=1, open=False, kwargs={"autocommit": True}
    )
    ensure_schema(database_url, "ledger")
    events = LedgerLog(env=eventsourcing_env(database_url, "ledger"))
    along_events = events.recorder.write_along if request.param.startswith("in the event") else None
    with (
        ConnectionPool(database_url, min_size=1, max_size=2, open=True) as pool,
        start_blocking_portal() as loop,
    ):
        loop.call(async_pool.open)
        keys = IdempotencyStore(pool, "api", async_pool, along_events)
        keys.create_table()
        try:
            yield keys, loop
        finally:
            loop.call(async_pool.close)
            events.close()


def claim_all(store: IdempotencyStore, loop: BlockingPortal, keys: list[str]) -> list[object]:
    async def claim() -> list[object]:
        claims = (store.claim("demo", key, b"fingerprint") for key in keys)
        return await asyncio.gather(*claims, return_exceptions=True)

    return loop.call(claim)


def test_concurrent_claims_of_different_keys_are_each_owned_in_one_statement(store):
    keys, loop = store
    statements = []
    run = keys._claims._run

    async def counted(items: list) -> list:
        statements.append(len(items))
        return await run(items)

    keys._claims._run = counted
    names = [f"batch-{uuid.uuid4().hex}" for _ in range(8)]
    claims = claim_all(keys, loop, names)
    assert all(claim.owned for claim in claims)
    assert statements == [8]


def test_two_concurrent_claims_of_one_key_leave_it_to_the_first_and_refuse_the_second(store):
    keys, loop = store
    name = f"twice-{uuid.uuid4().hex}"
    first, second = claim_all(keys, loop, [name, name])
    assert first.owned
    assert isinstance(second, ApiProblem)
    assert second.code == "idempotency_request_in_progress"


def test_concurrent_answers_are_each_stored_and_a_claim_taken_over_stores_nothing(store, database_url):
    keys, loop = store
    names = [f"answer-{uuid.uuid4().hex}" for _ in range(3)]
    claims = claim_all(keys, loop, names)
    stale = claims[2].created - timedelta(seconds=1)  # as if a retry had taken the key over since

    async def finish_all() -> list[bool]:
        answers = [
            keys.finish("demo", names[0], claims[0].created, StoredResponse(201, [], b"first")),
            keys.finish("demo", names[1], claims[1].created, StoredResponse(422, [], b"second")),
            keys.finish("demo", names[2], stale, StoredResponse(201, [], b"late")),
        ]
        return await asyncio.gather(*answers)

    assert loop.call(finish_all) == [True, True, False]
    with psycopg.connect(database_url) as conn:
        rows = dict(
            conn.execute(
                "SELECT key, body FROM api.idempotency_keys WHERE key = ANY(%s) AND state = 'done'", [names]
            ).fetchall()
        )
    assert {key: bytes(body) for key, body in rows.items()} == {names[0]: b"first", names[1]: b"second"}
    replay = claim_all(keys, loop, [names[1]])[0]
    assert replay.replay == StoredResponse(422, [], b"second")
