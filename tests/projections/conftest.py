"""Projection fixtures: a database of its own per test (the runner and the CLI use the fixed schemas `ledger`
and `read`), a `Ledger` writing to its event store, and the ReadModels view on it."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict

from application.credentials import VAR_ENV
from application.ledger import Ledger
from application.store.database import build_url, eventsourcing_env
from application.store.log import EVENTS_SCHEMA
from application.use_cases import UseCases
from projections.base.runner import open_view, replay
from projections.read_models import ReadModels
from tests.application.conftest import (  # noqa: F401
    addresses,
    clock,
    make_ledger,
    make_use_cases,
    settings,
    use_cases_of,
)
from tests.databases import scratch_database
from tests.projections.audit_support import lives, own_database
from tests.projections.scenario import READ_MODELS, populate


@pytest.fixture
def fresh_database(database_url: str) -> Iterator[str]:
    """A new, empty database on the test server; dropped (with its connections) at the end."""
    with scratch_database(database_url, "broker_proj") as url:
        yield url


@pytest.fixture
def store_ledger(fresh_database: str, make_ledger: Callable[..., Ledger]) -> Ledger:  # noqa: F811
    """A ledger whose events go to `ledger.ledger_events` of the fresh database, as in production."""
    with psycopg.connect(fresh_database, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(EVENTS_SCHEMA)))
    env = eventsourcing_env(fresh_database, EVENTS_SCHEMA)
    return make_ledger(env={**env, "POSTGRES_POOL_SIZE": "2", "POSTGRES_MAX_OVERFLOW": "0"})


@pytest.fixture
def store_use_cases(store_ledger: Ledger) -> UseCases:
    """The use cases on `store_ledger`."""
    return use_cases_of(store_ledger)


@pytest.fixture
def make_view(fresh_database: str) -> Iterator[Callable[..., ReadModels]]:
    """Opens the ReadModels view in a schema of the fresh database (`read` unless told); closed at the end."""
    opened: list[ReadModels] = []

    def make(schema: str = "read") -> ReadModels:
        view = open_view(fresh_database, READ_MODELS, schema=schema)
        opened.append(view)
        return view

    yield make
    for view in opened:
        view.datastore.close()


@pytest.fixture
def analyst_name(fresh_database: str) -> Iterator[str]:
    """A role name of this test's own (roles belong to the whole server); the role is dropped at the end."""
    name = f"analyst_{uuid.uuid4().hex[:10]}"
    yield name
    with psycopg.connect(fresh_database, autocommit=True) as conn:
        if conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (name,)).fetchone():
            conn.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(name)))
            conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(name)))


def connect_as(url: str, user: str, password: str) -> psycopg.Connection:
    params = conninfo_to_dict(url)
    params.update(user=user, password=password)
    return psycopg.connect(build_url(params), autocommit=True)


@pytest.fixture
def cli_database(fresh_database: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A fresh database the CLI uses (DATABASE_URL), with a var directory of its own."""
    monkeypatch.setenv("DATABASE_URL", fresh_database)
    monkeypatch.setenv(VAR_ENV, str(tmp_path / "var"))
    return fresh_database


@pytest.fixture
def populated(
    cli_database: str,
    store_ledger: Ledger,
    store_use_cases: UseCases,
    clock,  # noqa: F811
    addresses,  # noqa: F811
    make_view,
) -> str:
    """The CLI's fresh database with the scenario's history and its read models replayed."""
    populate(store_use_cases, clock, addresses)
    replay(store_ledger, READ_MODELS, make_view())
    return cli_database


@pytest.fixture
def traded(database_url: str) -> Iterator[str]:
    """A database with two customers' whole lives in its log, no projection run yet."""
    with own_database(database_url) as url:
        lives(url, "a", 2)
        yield url
