"""Schema creation at start: several workers starting at once on an empty database all succeed, and a start on
a database that has everything creates nothing (no CREATE TYPE that fails because the type exists)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
from eventsourcing.persistence import InfrastructureFactory
from eventsourcing.utils import Environment
from psycopg import sql

from application.store.database import ensure_schema, eventsourcing_env
from application.store.log import EVENTS_SCHEMA, LedgerLog
from tests.databases import scratch_database

WORKERS = 6


@pytest.fixture
def fresh_database(database_url: str) -> Iterator[str]:
    """A database of its own on the test server, dropped afterwards: empty, as on a first start."""
    with scratch_database(database_url, "bl_schema") as url:
        yield url


def all_at_once(start: Callable[[], Any], count: int = WORKERS) -> list[BaseException]:
    """Runs `start` in `count` threads released together; the errors they raised."""
    barrier = threading.Barrier(count)
    errors: list[BaseException] = []

    def run() -> None:
        barrier.wait()
        try:
            start()
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=run) for _ in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    return errors


def start_worker(url: str, group_commit: str, monkeypatch: pytest.MonkeyPatch) -> Callable[[], None]:
    """What an API worker does first with the database: the schema, then the event store's recorders."""
    env = eventsourcing_env(url, EVENTS_SCHEMA, group_commit=group_commit != "off")

    def start() -> None:
        ensure_schema(url, EVENTS_SCHEMA)
        factory = InfrastructureFactory.construct(env=Environment(LedgerLog.name, env))
        try:
            factory.application_recorder()
            factory.aggregate_recorder("snapshots")
        finally:
            factory.close()

    return start


@pytest.mark.parametrize("group_commit", ["on", "off"])
def test_workers_starting_at_once_on_an_empty_database_all_create_the_schema(
    fresh_database: str, group_commit: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    start = start_worker(fresh_database, group_commit, monkeypatch)

    assert all_at_once(start) == []
    assert all_at_once(start) == []  # and again, on a database that has it all

    with psycopg.connect(fresh_database) as conn:
        types = conn.execute(
            "SELECT typname FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace"
            " WHERE n.nspname = %s AND typname LIKE 'stored_event%%'",
            (EVENTS_SCHEMA,),
        ).fetchall()
        tables = {
            row[0]
            for row in conn.execute(
                "SELECT tablename FROM pg_tables WHERE schemaname = %s", (EVENTS_SCHEMA,)
            ).fetchall()
        }
    assert types == [("stored_event_uuid",)]
    assert {"ledger_events", "ledger_snapshots"} <= tables


def test_a_start_on_a_database_that_has_the_schema_runs_no_create_type(
    fresh_database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    start = start_worker(fresh_database, "on", monkeypatch)
    start()
    executed: list[str] = []
    original = psycopg.Cursor.execute

    def recording(self: psycopg.Cursor[Any], query: Any, *args: Any, **kwargs: Any) -> Any:
        text = query.as_string(self) if isinstance(query, sql.Composable) else str(query)
        executed.append(text)
        return original(self, query, *args, **kwargs)

    monkeypatch.setattr(psycopg.Cursor, "execute", recording)

    start()

    assert not [text for text in executed if "CREATE TYPE" in text or "CREATE SCHEMA" in text]
    assert any("to_regtype" in text for text in executed)


def test_ensure_schema_in_many_threads_at_once_creates_it_once(fresh_database: str) -> None:
    assert all_at_once(lambda: ensure_schema(fresh_database, "many")) == []

    with psycopg.connect(fresh_database) as conn:
        assert conn.execute("SELECT count(*) FROM pg_namespace WHERE nspname = 'many'").fetchone() == (1,)
