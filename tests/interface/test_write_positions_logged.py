"""The partners' write positions are a logged table: replicated to the standbys with the events, so a read
there (or on a standby promoted by a failover) still waits for a partner's last write. A table created
unlogged by an earlier version is made logged when the service starts."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import psycopg
import pytest
from psycopg_pool import ConnectionPool

from interface.http.read_your_writes import TABLE, WritePositions

LOGGED = "p"  # pg_class.relpersistence of a permanent (WAL-logged) table


@pytest.fixture
def schema(database_url: str) -> Iterator[str]:
    name = f"t_{uuid.uuid4().hex[:12]}"
    yield name
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')


def persistence(database_url: str, schema: str) -> str:
    with psycopg.connect(database_url) as conn:
        row = conn.execute(
            "SELECT relpersistence FROM pg_class WHERE oid = to_regclass(%s)", [f"{schema}.{TABLE}"]
        ).fetchone()
    assert row is not None, "no table of write positions"
    return row[0]


def create_table(database_url: str, schema: str) -> None:
    with ConnectionPool(database_url, min_size=0, max_size=1) as pool:
        WritePositions(pool, None, schema).create_table()  # type: ignore[arg-type]


def test_the_write_positions_are_created_logged(database_url: str, schema: str) -> None:
    create_table(database_url, schema)
    assert persistence(database_url, schema) == LOGGED


def test_an_unlogged_table_of_write_positions_is_made_logged_keeping_its_rows(
    database_url: str, schema: str
) -> None:
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
        conn.execute(
            f'CREATE UNLOGGED TABLE "{schema}".{TABLE} (partner text PRIMARY KEY, position bigint NOT NULL)'
        )
        conn.execute(f"INSERT INTO \"{schema}\".{TABLE} VALUES ('demo', 42)")
    create_table(database_url, schema)
    create_table(database_url, schema)  # a second start finds it logged: nothing to do
    assert persistence(database_url, schema) == LOGGED
    with psycopg.connect(database_url) as conn:
        rows = conn.execute(f'SELECT partner, position FROM "{schema}".{TABLE}').fetchall()
    assert rows == [("demo", 42)]
