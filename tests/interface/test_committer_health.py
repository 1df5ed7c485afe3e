"""Writes held up in the event store's committer: each is answered 503 with Retry-After within the committer's
deadline, GET /health says the committer does not commit, and once the hold is gone every partner's writes
commit again within seconds, a keyed write's retry included, without a restart. The real app runs in-process
with the committer's deadline shortened; another session holds the events table in EXCLUSIVE mode (the lock
each batch takes), so reads go on and only commits wait, as behind a stuck batch of another process."""

from __future__ import annotations

import contextlib
import threading
import time
import uuid
from collections.abc import Iterator

import httpx
from psycopg import sql

from application.store.group_commit import recorder as group_commit
from application.store.log import EVENTS_SCHEMA
from tests.databases import table_locked
from tests.in_process import AppTransport, InProcessClient, in_process_app

DEADLINE = 1.0
BOUND_SECONDS = 2 * DEADLINE + 6.0  # a batch and its retry, each cut at the deadline, and the request's work


# each test's own app, on a database of its own, its committer's deadline shortened
client = in_process_app(
    scope="function", own_database="committer", patches=[(group_commit, "COMMIT_DEADLINE", DEADLINE)]
)


def commits_held_up(url: str) -> contextlib.AbstractContextManager[None]:
    """Another session holding the events table's EXCLUSIVE lock while inside (at most 20 s)."""
    return table_locked(url, sql.Identifier(EVENTS_SCHEMA, "ledger_events"), "EXCLUSIVE", 20)


@contextlib.contextmanager
def writing_meanwhile(client, headers: dict[str, str]) -> Iterator[list[int]]:
    """A partner creating customers one after the other while inside (one at least); the statuses it got."""
    statuses: list[int] = []
    stop = threading.Event()

    def write() -> None:
        with httpx.Client(transport=AppTransport(client), base_url="http://testserver", timeout=60) as http:
            while True:
                statuses.append(http.post("/customer", json=new_customer(), headers=headers).status_code)
                if stop.is_set():
                    return

    writer = threading.Thread(target=write)
    writer.start()
    try:
        yield statuses
    finally:
        stop.set()
        writer.join(timeout=30)


def new_customer() -> dict[str, str]:
    return {"customerCode": f"held-{uuid.uuid4().hex[:10]}", "trustLevel": "Basic"}


def health_within(client, status: int, seconds: float) -> httpx.Response:
    deadline = time.monotonic() + seconds
    answer = client.get("/health")
    while answer.status_code != status and time.monotonic() < deadline:
        time.sleep(0.1)
        answer = client.get("/health")
    return answer


def test_held_up_writes_are_503_health_says_why_and_all_recover_without_a_restart(client: InProcessClient):
    url = client.database_url
    broker = client.headers_of("demo-broker")
    other = client.headers_of("other-broker")
    keyed = {**broker, "Idempotency-Key": f"held-{uuid.uuid4().hex}"}
    body = new_customer()
    assert health_within(client, 200, 10).status_code == 200
    with commits_held_up(url):
        started = time.monotonic()
        refused = client.post("/customer", json=body, headers=keyed)
        assert time.monotonic() - started < BOUND_SECONDS
        assert refused.status_code == 503, refused.text
        assert refused.json()["code"] == "database_unavailable"
        assert int(refused.headers["Retry-After"]) >= 1
        with writing_meanwhile(client, other) as statuses:
            stalled = health_within(client, 503, 15)
        assert stalled.status_code == 503, stalled.text
        assert stalled.json()["code"] == "committer_stalled"
        assert "committed nothing" in stalled.json()["detail"]
        assert int(stalled.headers["Retry-After"]) >= 1
        assert statuses and set(statuses) == {503}
    started = time.monotonic()
    assert client.post("/customer", json=new_customer(), headers=other).status_code == 201
    assert time.monotonic() - started < 5.0
    retried = client.post("/customer", json=body, headers=keyed)
    assert retried.status_code == 201, retried.text
    replayed = client.post("/customer", json=body, headers=keyed)
    assert replayed.headers.get("Idempotent-Replayed") == "true"
    assert replayed.content == retried.content
    assert health_within(client, 200, 5).status_code == 200
