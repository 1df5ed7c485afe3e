"""An Idempotency-Key's claim rides with the request's first save: one transaction carries the events and the
claim, and a save whose claim the database refuses (another request holds the key) writes nothing. In-process,
on the real app and PostgreSQL."""

from __future__ import annotations

import json
import uuid
from typing import Any

import psycopg
import pytest
from litestar.testing import TestClient

from interface.idempotency.keys import fingerprint

BUY = {"currencyCode": "EUR", "cryptoCode": "BTC", "fiatValue": 20, "paymentMethodCode": "BANK_EUR_BUY"}


def buy(customer: dict[str, str]) -> dict[str, Any]:
    return {**BUY, "customerCode": customer["code"], "destinationAddress": customer["address"]}


def post_buy(client: TestClient, broker: dict[str, str], key: str, body: dict[str, Any]) -> Any:
    headers = {**broker, "Idempotency-Key": key, "Content-Type": "application/json"}
    return client.post("/brokerbuy", content=json.dumps(body).encode(), headers=headers)


def stored_key(database_url: str, key: str) -> tuple[Any, ...] | None:
    with psycopg.connect(database_url) as conn:
        return conn.execute(
            "SELECT state, status, body FROM api.idempotency_keys WHERE key = %s", [key]
        ).fetchone()


def hold_key(database_url: str, key: str, fingerprint: bytes, state: str = "running", **answer: Any) -> None:
    """The key as another request left it: claimed and running (its lease alive), or answered."""
    with psycopg.connect(database_url) as conn:
        columns = "partner, key, fingerprint, state, lease_until, status, headers, body"
        stored = (answer.get("status"), json.dumps(answer.get("headers")), answer.get("body"))
        conn.execute(
            f"INSERT INTO api.idempotency_keys ({columns})"
            " VALUES ('demo', %s, %s, %s, now() + interval '1 minute', %s, %s::jsonb, %s)",
            [key, fingerprint, state, *stored],
        )


def fingerprint_of(body: dict[str, Any]) -> bytes:
    """The fingerprint of `post_buy`'s request with this body."""
    scope = {
        "method": "POST",
        "path": "/brokerbuy",
        "query_string": b"",
        "headers": [(b"api_version", b"1.2")],
    }
    return fingerprint(scope, json.dumps(body).encode())


def buys_stored(database_url: str) -> int:
    with psycopg.connect(database_url) as conn:
        return conn.execute(
            "SELECT count(*) FROM ledger.ledger_events WHERE topic = 'domain.transaction:Transaction.Staged'"
        ).fetchone()[0]


def test_a_keyed_buy_writes_its_claim_with_its_events_and_needs_one_transaction_more_for_its_answer(
    client: TestClient, broker: dict[str, str], customer: dict[str, str], database_url: str
) -> None:
    recorder = client.app.state.runtime.ledger.recorder
    before = recorder.batches_committed
    key = f"one-save-{uuid.uuid4().hex}"
    answer = post_buy(client, broker, key, buy(customer))
    assert answer.status_code == 201, answer.text
    assert recorder.batches_committed - before == 2  # the events with the claim, then the answer
    assert stored_key(database_url, key) == ("done", 201, answer.content)
    replay = post_buy(client, broker, key, buy(customer))
    assert (replay.content, replay.headers["idempotent-replayed"]) == (answer.content, "true")


def test_a_buy_whose_key_another_request_holds_writes_nothing_and_answers_409(
    client: TestClient, broker: dict[str, str], customer: dict[str, str], database_url: str
) -> None:
    key, body = f"held-{uuid.uuid4().hex}", buy(customer)
    hold_key(database_url, key, fingerprint_of(body))
    before = buys_stored(database_url)
    answer = post_buy(client, broker, key, body)
    assert answer.status_code == 409, answer.text
    assert answer.json()["code"] == "idempotency_request_in_progress"
    assert answer.headers["retry-after"] == "1"
    assert buys_stored(database_url) == before
    assert stored_key(database_url, key) == ("running", None, None)  # still the holder's


def test_a_buy_whose_key_was_answered_meanwhile_writes_nothing_and_replays_that_answer(
    client: TestClient, broker: dict[str, str], customer: dict[str, str], database_url: str
) -> None:
    key, body = f"answered-{uuid.uuid4().hex}", buy(customer)
    stored = b'{"transaction":"the first answer"}'
    headers = [["content-type", "application/json"]]
    hold_key(database_url, key, fingerprint_of(body), "done", status=201, headers=headers, body=stored)
    before = buys_stored(database_url)
    answer = post_buy(client, broker, key, body)
    assert (answer.status_code, answer.content, answer.headers["idempotent-replayed"]) == (
        201,
        stored,
        "true",
    )
    assert buys_stored(database_url) == before


def test_a_buy_under_a_key_another_request_used_is_422_and_writes_nothing(
    client: TestClient, broker: dict[str, str], customer: dict[str, str], database_url: str
) -> None:
    key = f"reused-{uuid.uuid4().hex}"
    hold_key(database_url, key, b"another request", "done", status=201, headers=[], body=b"{}")
    before = buys_stored(database_url)
    answer = post_buy(client, broker, key, buy(customer))
    assert answer.status_code == 422, answer.text
    assert answer.json()["code"] == "idempotency_key_reused"
    assert buys_stored(database_url) == before


def test_a_claim_whose_lease_lapsed_is_taken_over_by_the_save_of_its_retry(
    client: TestClient, broker: dict[str, str], customer: dict[str, str], database_url: str
) -> None:
    key, body = f"lapsed-{uuid.uuid4().hex}", buy(customer)
    hold_key(database_url, key, fingerprint_of(body))
    with psycopg.connect(database_url) as conn:
        conn.execute(
            "UPDATE api.idempotency_keys SET lease_until = now() - interval '1 second' WHERE key = %s", [key]
        )
    answer = post_buy(client, broker, key, body)
    assert answer.status_code == 201, answer.text
    assert stored_key(database_url, key) == ("done", 201, answer.content)


def test_a_request_that_saves_nothing_claims_its_key_as_it_answers(
    client: TestClient, broker: dict[str, str], customer: dict[str, str], database_url: str
) -> None:
    key = f"no-save-{uuid.uuid4().hex}"
    body = {**buy(customer), "customerCode": f"nobody-{uuid.uuid4().hex[:8]}"}
    refused = post_buy(client, broker, key, body)
    assert refused.status_code == 404, refused.text  # judged against what is recorded: kept for the key
    assert stored_key(database_url, key) == ("done", 404, refused.content)
    assert post_buy(client, broker, key, body).content == refused.content


def test_the_claims_riding_with_a_batch_go_as_one_call_that_answers_each_by_its_position_or_refuses_all(
    client: TestClient, database_url: str
) -> None:
    store = client.app.state.runtime.idempotency
    keys = [f"batched-{n}-{uuid.uuid4().hex}" for n in range(3)]
    claims = [store.claim_with_save("demo", key, b"fingerprint") for key in reversed(keys)]
    statement, arrays = claims[0].statement, claims[0].arrays
    with psycopg.connect(database_url) as conn:
        answered = conn.execute(statement, arrays([claim.row for claim in claims]), binary=True).fetchall()
        created = dict(conn.execute("SELECT key, created FROM api.idempotency_keys").fetchall())
    assert sorted(answered) == sorted((n, created[claim.row[1]]) for n, claim in enumerate(claims, 1))
    held, free = keys[1], f"free-{uuid.uuid4().hex}"
    again = [store.claim_with_save("demo", key, b"fingerprint").row for key in (free, held)]
    with psycopg.connect(database_url) as conn, pytest.raises(psycopg.errors.UniqueViolation, match=held):
        conn.execute(statement, arrays(again), binary=True)
    assert stored_key(database_url, free) is None  # refused together: nothing claimed
