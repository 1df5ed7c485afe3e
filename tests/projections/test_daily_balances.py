"""`read.daily_balances` and `read.balances_at` on the Postings view of two partners' flows: a deployment
whose postings were kept before the table existed gets it filled when the view opens, and `asOf`, the
console's days, the reconciliation and the exports read their sums from it (a day's row changed shows in
all four)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, datetime, time, timedelta
from decimal import Decimal
from typing import Any

import psycopg
import pytest
from psycopg import sql

from application.use_cases import UseCases
from projections.base.runner import ProjectionSpec, open_view, replay
from projections.exports import BALANCES, Period, read_batches
from projections.ledger_postings import Postings, PostingsProjection
from projections.reconciliation import Period as Span
from projections.reconciliation import read_reserves
from projections.reserve_positions import read_daily_positions, read_positions_at
from tests.projections.test_ledger_postings import drive

POSTINGS = ProjectionSpec(PostingsProjection, Postings)


@pytest.fixture
def schema(postgres_env: dict[str, str]) -> str:
    return postgres_env["POSTGRES_SCHEMA"]


@pytest.fixture
def conn(database_url: str) -> Iterator[psycopg.Connection]:
    with psycopg.connect(database_url, autocommit=True) as connection:
        yield connection


@pytest.fixture
def replayed(
    make_use_cases: Callable[..., UseCases], addresses: Any, database_url: str, schema: str
) -> Iterator[Postings]:
    """The view, replayed over every kind of posting of two partners."""
    use_cases = make_use_cases()
    drive(use_cases, addresses)
    view = open_view(database_url, POSTINGS, schema=schema)
    replay(use_cases.ledger, POSTINGS, view)
    yield view
    view.datastore.close()


def rows(conn: psycopg.Connection, schema: str, query: str) -> list[tuple[Any, ...]]:
    return conn.execute(sql.SQL(query).format(sql.Identifier(schema, "daily_balances"))).fetchall()


def test_a_daily_table_created_beside_postings_kept_before_it_is_filled_from_them(
    replayed: Postings, database_url: str, conn: psycopg.Connection, schema: str
) -> None:
    every_row = "SELECT * FROM {} ORDER BY partner, account, currency_code, day"
    kept = rows(conn, schema, every_row)
    assert {row[0] for row in kept} == {"demo", "other"}
    conn.execute(sql.SQL("DROP TABLE {}").format(sql.Identifier(schema, "daily_balances")))
    open_view(database_url, POSTINGS, schema=schema).datastore.close()  # as the next start opens it
    assert rows(conn, schema, every_row) == kept
    open_view(database_url, POSTINGS, schema=schema).datastore.close()  # filled once: nothing added again
    assert rows(conn, schema, every_row) == kept


def test_as_of_the_days_the_reconciliation_and_the_exports_read_the_daily_sums(
    replayed: Postings, conn: psycopg.Connection, schema: str
) -> None:
    """One more BTC debited to demo's hot wallet on its first day, in the daily table only: every reader
    as of that day's end or later sees it; the reconciliation, which sums the period's postings apart,
    finds the reserve unbalanced."""
    first = rows(conn, schema, "SELECT min(day) FROM {} WHERE partner = 'demo'")[0][0]
    end = datetime.combine(first, time.max, UTC)
    later = end + timedelta(days=2)

    def hot_wallet() -> list[Decimal]:
        as_of = {(p.name, p.code): p.total for p in read_positions_at(conn, "demo", end, schema=schema)}
        (_, by_day), *_ = read_daily_positions(conn, "demo", first, first, schema=schema)
        day = {(p.name, p.code): p.total for p in by_day}
        rolled = read_reserves(conn, "demo", Span(end - timedelta(days=1), end), schema)["demo"]
        closing = next(r.closing for r in rolled if (r.name, r.code) == ("hot-wallet", "BTC"))
        with conn.transaction():
            exported = [
                row
                for batch in read_batches(conn, BALANCES, Period("demo", end, later), schema)
                for row in batch
            ]
        opening = next(row[3] for row in exported if row[1:3] == ("hot-wallet", "BTC"))
        return [as_of["hot-wallet", "BTC"], day["hot-wallet", "BTC"], closing, opening]

    before = hot_wallet()
    assert len(set(before)) == 1
    moved = rows(
        conn,
        schema,
        "UPDATE {} SET debit = debit + 1 WHERE partner = 'demo' AND account = 'reserve:hot-wallet' "
        f"AND currency_code = 'BTC' AND day = '{first.isoformat()}' RETURNING day",
    )
    assert len(moved) == 1
    assert hot_wallet() == [total + 1 for total in before]
    rolled = read_reserves(conn, "demo", Span(end - timedelta(days=1), end), schema)["demo"]
    assert [(r.name, r.code) for r in rolled if not r.balanced] == [("hot-wallet", "BTC")]
