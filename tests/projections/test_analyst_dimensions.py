"""The dimensions written from the settings, fee revenue from the postings, and amounts at their asset's
scale in the views (`projections.dimensions`, `projections.analyst_schema`)."""

from __future__ import annotations

from decimal import Decimal

import psycopg

from application.settings import load_settings
from projections.analyst_schema import prepare
from projections.base.runner import open_view, replay
from projections.catalog import by_name
from projections.dimensions import Dimensions, refresh_dimensions
from tests.projections.scenario import READ_MODELS, populate


def test_the_dimensions_hold_the_settings_and_are_rewritten_only_when_they_differ(fresh_database) -> None:
    settings = load_settings()
    prepare(fresh_database, Dimensions.of(settings))
    with psycopg.connect(fresh_database, autocommit=True) as conn:
        assets = dict(conn.execute("SELECT asset_code, places FROM read.assets").fetchall())
        assert assets == {
            **{code: c.minor_units for code, c in settings.currencies.items()},
            **{code: c.precision for code, c in settings.cryptos.items()},
        }
        methods = {row[0] for row in conn.execute("SELECT payment_method_code FROM read.payment_methods")}
        assert methods == set(settings.payment_methods)
        assert refresh_dimensions(conn, Dimensions.of(settings)) is False
        fewer = Dimensions(Dimensions.of(settings).assets[:1], ())
        assert refresh_dimensions(conn, fewer) is True
        assert conn.execute("SELECT count(*) FROM read.assets").fetchone()[0] == 1
        day = conn.execute("SELECT weekday, weekend, iso_week FROM read.calendar WHERE day = '2026-03-14'")
        assert day.fetchone() == ("Saturday", True, 11)


def test_fee_revenue_is_the_revenue_postings_per_day_at_the_currencys_scale(
    fresh_database, store_ledger, store_use_cases, clock, addresses, make_view
) -> None:
    populate(store_use_cases, clock, addresses)
    replay(store_ledger, READ_MODELS, make_view())
    postings = open_view(fresh_database, by_name("Postings"))
    replay(store_ledger, by_name("Postings"), postings)
    postings.datastore.close()
    prepare(fresh_database, Dimensions.of(load_settings()))
    with psycopg.connect(fresh_database) as conn:
        expected = conn.execute(
            "SELECT partner, (at AT TIME ZONE 'UTC')::date, currency_code, sum(credit - debit) "
            "FROM read.postings WHERE account IN ('fee_revenue', 'bank_fees', 'network_fee_recovery') "
            "GROUP BY 1, 2, 3 ORDER BY 1, 2, 3"
        ).fetchall()
        rows = conn.execute(
            "SELECT partner, day, currency_code, revenue, partner_fees + bank_fees + network_fees, places "
            "FROM read.fee_revenue ORDER BY 1, 2, 3"
        ).fetchall()
        monthly = conn.execute(
            "SELECT fiat_value, crypto_code, crypto_amount FROM read.monthly_volumes"
        ).fetchall()
    assert expected and [row[:4] for row in rows] == expected
    assert all(revenue == parts and places == 2 for *_, revenue, parts, places in rows)
    assert all(-revenue.as_tuple().exponent == 2 for *_, revenue, _, _ in rows)  # 12.50, never 12.5
    assert all(-fiat.as_tuple().exponent == 2 for fiat, _, _ in monthly)
    assert all(-amount.as_tuple().exponent == 8 for _, code, amount in monthly if code == "BTC")
    assert sum((row[3] for row in rows), Decimal(0)) > 0
