"""A request blocked by another client's lock ends in a bounded 503, not a hang: every connection of the
event store's and the read models' pools has a lock and a statement timeout (`application.store.database`).
The real app runs in-process with the timeouts shortened; another connection holds an ACCESS EXCLUSIVE lock on
the table the request must read, as a migration or a VACUUM FULL would."""

from __future__ import annotations

import contextlib
import time
import uuid

from psycopg import sql

from application.store import database
from application.store.database import Timeouts
from application.store.log import EVENTS_SCHEMA
from tests.databases import table_locked
from tests.in_process import InProcessClient, in_process_app

SHORT = Timeouts(lock=0.5, statement=5.0)
BOUND_SECONDS = 3.0  # the lock timeout, a connection's set-up and the request's own work


# each test's own app, on a database of its own (no other test's writes for a read to wait for), with
# short timeouts
client = in_process_app(scope="function", own_database="blocked", patches=[(database, "API_TIMEOUTS", SHORT)])


def locked_exclusively(url: str, table: sql.Composable) -> contextlib.AbstractContextManager[None]:
    """Another client's transaction holding `table` in ACCESS EXCLUSIVE mode while inside (at most 10 s)."""
    return table_locked(url, table, "ACCESS EXCLUSIVE", 10)


def assert_bounded_503(answer, started: float) -> None:
    elapsed = time.monotonic() - started
    assert answer.status_code == 503, answer.text
    assert answer.headers["content-type"].startswith("application/problem+json")
    assert answer.json()["code"] == "database_unavailable"
    assert int(answer.headers["Retry-After"]) >= 1
    assert elapsed < BOUND_SECONDS, f"answered after {elapsed:.1f} s"


def test_a_write_whose_aggregates_are_locked_away_is_answered_503_within_the_lock_timeout(
    client: InProcessClient,
):
    database_url = client.database_url
    headers = client.headers_of("demo-broker")
    body = {"customerCode": f"blocked-{uuid.uuid4().hex[:8]}", "trustLevel": "Basic"}
    with locked_exclusively(database_url, sql.Identifier(EVENTS_SCHEMA, "ledger_events")):
        started = time.monotonic()
        answer = client.post("/customer", json=body, headers=headers)
    assert_bounded_503(answer, started)
    assert client.post("/customer", json=body, headers=headers).status_code == 201  # nothing was written


def test_a_list_whose_read_model_is_locked_away_is_answered_503_within_the_lock_timeout(
    client: InProcessClient,
):
    database_url = client.database_url
    headers = client.headers_of("other-broker")  # has written nothing: its reads wait for nothing
    reader = client.app.state.runtime.reader
    with locked_exclusively(database_url, reader.view.table("transactions")):
        started = time.monotonic()
        answer = client.get("/transactions/custodian", headers=headers)
    assert_bounded_503(answer, started)
    assert client.get("/transactions/custodian", headers=headers).status_code == 200
