"""A projection writes the same tables whatever the size of the pages it is replayed in: the rows a page
writes at its end (appended, kept per key, summed per day) add up to what event-by-event writing gives."""

from __future__ import annotations

from typing import Any

from psycopg.sql import SQL

from projections.base.postgres import ReadModel
from projections.base.runner import open_view, replay
from projections.catalog import PROJECTIONS
from tests.projections.scenario import populate


def table_rows(view: ReadModel, table: str) -> list[tuple[Any, ...]]:
    with view.datastore.transaction(commit=False) as curs:
        statement = SQL("SELECT * FROM {} AS t ORDER BY t::text").format(view.table(table))
        return [tuple(row.values()) for row in curs.execute(statement).fetchall()]


def test_every_projection_writes_the_same_tables_in_pages_of_one_two_and_five_hundred_events(
    fresh_database, store_ledger, store_use_cases, clock, addresses
):
    populate(store_use_cases, clock, addresses)
    for spec in PROJECTIONS:
        tables = {}
        for page in (500, 2, 1):
            view = open_view(fresh_database, spec, schema=f"{spec.name.lower()}_page_{page}")
            try:
                replay(store_ledger, spec, view, batch=page)
                tables[page] = {table: table_rows(view, table) for table in view.tables}
            finally:
                view.datastore.close()
        assert tables[500] == tables[2] == tables[1], spec.name
        assert any(tables[500].values()), spec.name
