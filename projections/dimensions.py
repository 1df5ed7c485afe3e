"""The dimensions of the read schema, for a star schema over the read models (docs/analytics.md,
"Dimensions"):

- `read.assets`: every fiat currency and crypto-currency of the settings with its kind and its places (the
  scale its amounts are shown at: `round(amount, places)`);
- `read.payment_methods`: every payment method of the settings with its direction, currency and fees;
- `read.calendar` (a view): one row per UTC day from 2000 to 2100, with its month, quarter, year, ISO week
  and weekday.

The settings are not in the database, so the two tables are written from them: the service refreshes them
at each start (`refresh_dimensions`, from `interface.app.build_runtime`, and `broker-ledger analyst`'s
commands), rewriting them only when they differ from the settings (a look takes no lock). Their rows are
no one partner's and every analyst's: a policy shows them to every role, so an analyst of one partner
(`projections.partner_policies`) reads them as well. Rebuilds leave them as they are: no event writes them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import psycopg
from psycopg.sql import SQL, Composed, Identifier

from projections.base.postgres import READ_SCHEMA
from projections.partner_policies import every_row

ASSETS, PAYMENT_METHODS, CALENDAR = "assets", "payment_methods", "calendar"
DIMENSION_TABLES = (ASSETS, PAYMENT_METHODS)
DIMENSION_VIEWS = (CALENDAR,)

ASSETS_TABLE = """CREATE TABLE IF NOT EXISTS {assets} (
    asset_code text PRIMARY KEY,
    kind text NOT NULL,
    places integer NOT NULL)"""

PAYMENT_METHODS_TABLE = """CREATE TABLE IF NOT EXISTS {payment_methods} (
    payment_method_code text PRIMARY KEY,
    direction text NOT NULL,
    currency_code text NOT NULL,
    fee_rate numeric NOT NULL,
    bank_fee numeric NOT NULL,
    validity_minutes integer NOT NULL)"""

CALENDAR_VIEW = """CREATE OR REPLACE VIEW {calendar} WITH (security_invoker = true) AS
SELECT d::date AS day, date_trunc('month', d)::date AS month, extract(quarter FROM d)::integer AS quarter,
       extract(year FROM d)::integer AS year, extract(isoyear FROM d)::integer AS iso_year,
       extract(week FROM d)::integer AS iso_week, extract(isodow FROM d)::integer AS iso_weekday,
       to_char(d, 'FMDay') AS weekday, extract(isodow FROM d) >= 6 AS weekend
FROM generate_series(timestamp '2000-01-01', timestamp '2100-12-31', interval '1 day') AS d"""


def dimension_statements(table: Callable[[str], Identifier]) -> list[Composed]:
    """The dimension tables (each with its policy: every row to every role) and the calendar view."""
    names = {name: table(name) for name in (*DIMENSION_TABLES, *DIMENSION_VIEWS)}
    statements = [SQL(text).format(**names) for text in (ASSETS_TABLE, PAYMENT_METHODS_TABLE, CALENDAR_VIEW)]
    return statements + [every_row(table, name) for name in DIMENSION_TABLES]


@dataclass(frozen=True)
class Dimensions:
    """The rows of the dimension tables, as the settings give them (projections do not read the settings:
    the caller hands them over)."""

    assets: tuple[tuple[str, str, int], ...]  # (asset_code, kind, places)
    payment_methods: tuple[tuple[str, str, str, Decimal, Decimal, int], ...]

    @classmethod
    def of(cls, settings: Any) -> Dimensions:
        """From `application.settings.Settings` (duck-typed: projections import nothing of application)."""
        fiat = [(code, "fiat", c.minor_units) for code, c in settings.currencies.items()]
        crypto = [(code, "crypto", c.precision) for code, c in settings.cryptos.items()]
        methods = [
            (code, str(m.direction), m.currency, m.fee_rate, m.bank_fee, m.validity_minutes)
            for code, m in settings.payment_methods.items()
        ]
        return cls(tuple(sorted(fiat + crypto)), tuple(sorted(methods)))


def refresh_dimensions(
    conn: psycopg.Connection[Any], dimensions: Dimensions, schema: str = READ_SCHEMA
) -> bool:
    """Makes the dimension tables hold `dimensions`' rows exactly; writes (and locks) only when they differ.
    Returns whether anything was written. The tables must exist (`dimension_statements`)."""
    changed = False
    for name, rows in ((ASSETS, dimensions.assets), (PAYMENT_METHODS, dimensions.payment_methods)):
        changed |= _replace_if_different(conn, Identifier(schema, name), rows)
    return changed


def _replace_if_different(
    conn: psycopg.Connection[Any], table: Identifier, rows: Iterable[tuple[Any, ...]]
) -> bool:
    wanted = sorted(rows)
    with conn.cursor() as cursor:
        have = sorted(cursor.execute(SQL("SELECT * FROM {}").format(table)).fetchall())
        if [tuple(row) for row in have] == wanted:
            return False
        with conn.transaction():
            cursor.execute(SQL("DELETE FROM {}").format(table))
            if wanted:
                marks = SQL(", ").join(SQL("%s") for _ in wanted[0])
                cursor.executemany(SQL("INSERT INTO {} VALUES ({})").format(table, marks), wanted)
    return True
