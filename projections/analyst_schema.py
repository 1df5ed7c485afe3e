"""What the read schema gives analysts beside the projections' own tables, made ready at each start of the
service (`interface.app.build_runtime`) and by `broker-ledger analyst`'s commands (`prepare`):

- the dimension tables' rows, from the settings (`projections.dimensions`);
- `read.fee_revenue`, the one definition of fee revenue: the revenue accounts' postings (`fee_revenue`,
  `bank_fees`, `network_fee_recovery`, credits less debits) per partner, UTC day on which they were earned
  and currency, at the currency's scale (docs/analytics.md, "Fee revenue", says how it differs from the
  fees of `read.daily_volumes`);
- the comments of every table, view and column, from docs/analytics.md (`projections.comments`).

Each step looks before it changes anything, so a start that finds all in place writes nothing and takes no
lock but the view's (`CREATE OR REPLACE VIEW`, as the read models' own views).
"""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg.sql import SQL, Identifier

from projections.base.postgres import READ_SCHEMA
from projections.base.runner import open_view
from projections.catalog import by_name
from projections.comments import describe
from projections.dimensions import ASSETS, Dimensions, refresh_dimensions
from projections.read_models import CREATE_LOCK as READ_MODELS_CREATE_LOCK
from projections.read_tables import at_scale

FEE_REVENUE = "fee_revenue"
REVENUE_ACCOUNTS = {
    "fee_revenue": "partner_fees",
    "bank_fees": "bank_fees",
    "network_fee_recovery": "network_fees",
}
SUMS = ", ".join(
    at_scale(f"coalesce(sum(p.credit - p.debit) FILTER (WHERE p.account = '{account}'), 0)", "a.places")
    + f" AS {name}"
    for account, name in REVENUE_ACCOUNTS.items()
)
FEE_REVENUE_VIEW = (
    """CREATE OR REPLACE VIEW {fee_revenue} WITH (security_invoker = true) AS
SELECT p.partner, (p.at AT TIME ZONE 'UTC')::date AS day, p.currency_code, """
    + SUMS.replace("{", "{{").replace("}", "}}")
    + ", "
    + at_scale("sum(p.credit - p.debit)", "a.places")
    + """ AS revenue, a.places
FROM {postings} AS p
LEFT JOIN {assets} AS a ON a.asset_code = p.currency_code
WHERE p.account IN ('fee_revenue', 'bank_fees', 'network_fee_recovery')
GROUP BY p.partner, (p.at AT TIME ZONE 'UTC')::date, p.currency_code, a.places"""
)
ANALYST_VIEWS = (FEE_REVENUE,)
FEE_REVENUE_COLUMNS = ("partner", "day", "currency_code", *REVENUE_ACCOUNTS.values(), "revenue", "places")
PREPARE_LOCK = 0x414E_414C_5953_5453  # serialises `prepare` of processes starting together


def prepare(url: str, dimensions: Dimensions | None) -> None:
    """Makes the read schema ready for analysts: the read models' and postings' tables (opened), then what
    `views_and_comments` adds; as several processes start at once."""
    for name in ("ReadModels", "Postings"):
        open_view(url, by_name(name)).datastore.close()
    views_and_comments(url, dimensions)


def views_and_comments(url: str, dimensions: Dimensions | None) -> None:
    """The dimensions' rows (when `dimensions` is given), the analysts' views and every comment, in one
    transaction under an advisory lock, and under the read models' creation lock: another process opening
    the read models meanwhile replaces their views (calendar, monthly_volumes, ...) in one transaction while
    this one comments them in another order, and the two deadlocked (a worker of two starting together died
    of it)."""
    with psycopg.connect(url, autocommit=True) as conn, conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (PREPARE_LOCK,))
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (READ_MODELS_CREATE_LOCK,))
        if dimensions is not None:
            refresh_dimensions(conn, dimensions)
        create_views(conn)
        describe(conn)


def create_views(conn: psycopg.Connection[Any], schema: str = READ_SCHEMA) -> None:
    """The analysts' views, each (re)created only when missing or of other columns than these: `CREATE OR
    REPLACE VIEW` would wait for every analyst's query of it."""
    names = {name: Identifier(schema, name) for name in (FEE_REVENUE, "postings", ASSETS)}
    found = conn.execute(
        "SELECT array_agg(attname::text ORDER BY attnum) FROM pg_attribute WHERE attrelid = to_regclass(%s) "
        "AND attnum > 0 AND NOT attisdropped",
        (f"{schema}.{FEE_REVENUE}",),
    ).fetchone()
    if found is None or found[0] != list(FEE_REVENUE_COLUMNS):
        conn.execute(SQL(FEE_REVENUE_VIEW).format(**names))
