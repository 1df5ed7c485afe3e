"""An Idempotency-Key whose answer cannot be kept (the database went away after the request was executed, or
the answer is over the size a key keeps): the client still gets the whole answer, and the key is freed, so a
retry runs again rather than waiting on a claim that nobody finishes. In-process, on the real app and
PostgreSQL."""

from __future__ import annotations

import uuid

import psycopg
import pytest

from interface.idempotency import keys as idempotency
from interface.idempotency.keys import IdempotencyStore
from tests.in_process import InProcessClient


def kept_keys(database_url: str, key: str) -> int:
    with psycopg.connect(database_url) as conn:
        row = conn.execute("SELECT count(*) FROM api.idempotency_keys WHERE key = %s", [key]).fetchone()
    return row[0]


def test_an_answer_that_cannot_be_kept_is_still_sent_whole_and_its_key_is_freed(
    client: InProcessClient, database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def database_gone(*args: object) -> bool:
        raise psycopg.OperationalError("connection lost")

    monkeypatch.setattr(IdempotencyStore, "finish", database_gone)
    key = f"lost-answer-{uuid.uuid4().hex}"
    code = f"lost-{uuid.uuid4().hex[:12]}"
    headers = {**client.headers_of("demo-broker"), "Idempotency-Key": key}
    answer = client.post("/customer", json={"customerCode": code, "trustLevel": "Basic"}, headers=headers)
    assert answer.status_code == 201, answer.text
    assert answer.json()["customerCode"] == code
    assert kept_keys(database_url, key) == 0  # free: a retry is executed, not held as still running


def test_an_answer_over_the_size_a_key_keeps_is_sent_whole_and_its_key_is_freed(
    client: InProcessClient, database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(idempotency, "MAX_STORED_ANSWER", 64)  # below any answer: as an oversized one
    key = f"large-answer-{uuid.uuid4().hex}"
    headers = {**client.headers_of("demo-broker"), "Idempotency-Key": key}
    body = {"customerCode": f"large-{uuid.uuid4().hex[:12]}", "trustLevel": "Basic"}
    answer = client.post("/customer", json=body, headers=headers)
    assert answer.status_code == 201, answer.text
    assert answer.json()["customerCode"] == body["customerCode"]
    assert kept_keys(database_url, key) == 0  # neither kept nor held: a retry is executed again
    retried = client.post("/customer", json=body, headers=headers)  # run again (and refused: it exists now)
    assert "Idempotent-Replayed" not in retried.headers
