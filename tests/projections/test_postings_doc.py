"""The "Ledger postings" section of docs/analytics.md: every query runs against a replayed Postings view of
two partners' books, and every table and column of the view is described."""

from __future__ import annotations

import re
from decimal import Decimal
from pathlib import Path
from typing import Any

import psycopg

from application.commands import AdjustmentRequest
from application.ledger import Ledger
from application.use_cases import UseCases
from projections.base.runner import ProjectionSpec, open_view, replay
from projections.ledger_postings import Postings, PostingsProjection
from tests.projections.test_ledger_postings import drive

DOC = Path(__file__).resolve().parents[2] / "docs" / "analytics.md"
BLOCK = re.compile(r"^```postgresql\n(.*?)^```", re.MULTILINE | re.DOTALL)
POSTINGS = ProjectionSpec(PostingsProjection, Postings)


def section() -> str:
    text = DOC.read_text()
    start = text.index("## Ledger postings")
    end = text.find("\n## ", start + 1)
    return text[start : end if end > 0 else len(text)]


def test_the_section_describes_every_table_and_column_of_the_view(fresh_database: str) -> None:
    text = section()
    view = open_view(fresh_database, POSTINGS)
    try:
        with view.datastore.transaction(commit=False) as curs:
            for table in view.tables:
                assert f"`read.{table}`" in text, table
                if table in ("posting_deals", "reserve_places"):
                    continue  # named, not for analysis
                columns = curs.execute(
                    "SELECT column_name FROM information_schema.columns WHERE table_schema = 'read' "
                    "AND table_name = %s",
                    (table,),
                ).fetchall()
                assert [c["column_name"] for c in columns if f"`{c['column_name']}`" not in text] == []
    finally:
        view.datastore.close()


def test_every_query_of_the_section_runs_and_the_books_balance(
    fresh_database: str, store_ledger: Ledger, store_use_cases: UseCases, addresses: Any
) -> None:
    drive(store_use_cases, addresses)
    store_use_cases.reserves.record_adjustment(
        "other", AdjustmentRequest("OpeningBalance", "USD", Decimal(50), "bank", "Exchange")
    )
    view = open_view(fresh_database, POSTINGS)
    try:
        replay(store_ledger, POSTINGS, view)
    finally:
        view.datastore.close()
    queries = BLOCK.findall(section())
    assert len(queries) >= 4
    with psycopg.connect(fresh_database) as conn:
        answers = [conn.execute(query).fetchall() for query in queries]
    assert {partner for partner, _, _ in answers[0]} == {"demo", "other"}
    assert {off for _, _, off in answers[0]} == {Decimal(0)}  # each partner's books balance
    reserves = {(partner, account, code) for partner, account, code, *_ in answers[-1]}
    assert {("demo", "reserve:hot-wallet", "BTC"), ("other", "reserve:bank", "USD")} <= reserves
    assert ("demo", "reserve:bank", "USD") not in reserves
