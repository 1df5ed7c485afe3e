"""The Postings view against PostgreSQL: a ledger driven through buys, sells and reserve adjustments of two
partners is replayed into it; postings balance per currency and per partner, each partner's reserves follow
its own flows only, a rebuild equals the live view, tables of the shape before reserves were per partner are
rebuilt, and an unbalanced posting is never written."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from decimal import Decimal
from typing import Any

import psycopg
import pytest

from application.commands import AdjustmentRequest, BuyRequest, DepositReport, SellRequest, SendoutReport
from application.use_cases import UseCases
from domain.transaction import Transaction
from projections import posting_rules as rules
from projections.base.runner import ProjectionFailed, ProjectionSpec, open_view, replay
from projections.ledger_postings import Postings, PostingsProjection
from projections.posting_rules import UnbalancedPosting
from projections.reserve_positions import read_position, read_positions, wait_for_position

POSTINGS = ProjectionSpec(PostingsProjection, Postings)
ALWAYS = [("hot-wallet", "BTC"), ("hot-wallet", "ETH"), ("bank", "EUR")]
REQUIRED = 2  # BTC confirmations in the demo settings


@pytest.fixture
def schema(postgres_env: dict[str, str]) -> str:
    return postgres_env["POSTGRES_SCHEMA"]


@pytest.fixture
def view(database_url: str, schema: str) -> Iterator[Postings]:
    opened = open_view(database_url, POSTINGS, schema=schema)
    yield opened
    opened.datastore.close()


@pytest.fixture
def conn(database_url: str) -> Iterator[psycopg.Connection]:
    with psycopg.connect(database_url, autocommit=True) as connection:
        yield connection


class Flows:
    """A customer of partner demo (with Payouts) and one of other (without), and their transactions."""

    def __init__(self, use_cases: UseCases, addresses: Any) -> None:
        self.use_cases = use_cases
        self.wallets: dict[str, tuple[str, str]] = {}
        for partner in ("demo", "other"):
            use_cases.customers.register_customer(partner, "c1", "Plus", status="ACTIVE")
            address = addresses.next("BTC")
            account, _ = use_cases.customers.open_account(partner, "c1", address)
            self.wallets[partner] = (address, account.code)

    def buy(self, fiat: str, partner: str = "demo") -> Transaction:
        address, _ = self.wallets[partner]
        request = BuyRequest("c1", "EUR", "BTC", Decimal(fiat), address, "BANK_EUR_BUY")
        return self.use_cases.buys.create(partner, request, stage=False)

    def sell(self, crypto: str, partner: str = "demo") -> Transaction:
        _, account = self.wallets[partner]
        request = SellRequest("c1", account, "EUR", "BTC", "BANK_EUR_SELL", crypto_amount=Decimal(crypto))
        return self.use_cases.sells.create(partner, request)

    def deposit(self, sell: Transaction, confirmations: int, amount: Decimal | None = None) -> None:
        paid = sell.order.quote.crypto_amount if amount is None else amount
        report = DepositReport("BTC", sell.order.destination_address, f"in-{sell.code}", paid, confirmations)
        self.use_cases.settlement.report_deposit(sell.order.partner, report)

    def sendout(self, buy: Transaction, confirmations: int) -> None:
        self.use_cases.settlement.report_sendout(
            "demo", SendoutReport(buy.code, f"out-{buy.code}", confirmations)
        )


def adjust(
    use_cases: UseCases,
    kind: str,
    code: str,
    amount: str,
    to: tuple[str, str],
    source: Any = None,
    partner: str = "demo",
) -> None:
    request = AdjustmentRequest(kind, code, Decimal(amount), *to, *(source or (None, None)))
    use_cases.reserves.record_adjustment(partner, request)


def drive(use_cases: UseCases, addresses: Any) -> dict[str, dict[str, Decimal]]:
    """Every kind of posting, of partner demo (with Payouts) and of other (without, one sell); returns what
    each partner's hot wallet, bank and cold-1 should show."""
    adjust(use_cases, "OpeningBalance", "BTC", "5", ("hot-wallet", "HotWallet"))
    adjust(use_cases, "OpeningBalance", "EUR", "10000", ("bank", "Exchange"))
    adjust(use_cases, "Move", "BTC", "2", ("cold-1", "ColdStore"), ("hot-wallet", "HotWallet"))
    adjust(use_cases, "OpeningBalance", "BTC", "0.5", ("cold-1", "ColdStore"), partner="other")
    flows = Flows(use_cases, addresses)
    sent = flows.buy("100")
    flows.sendout(sent, 0)
    flows.sendout(sent, REQUIRED)
    open_buy = flows.buy("50")
    seen = flows.sell("0.001")
    flows.deposit(seen, 1)
    to_payout = flows.sell("0.002")
    flows.deposit(to_payout, REQUIRED)
    paid = flows.sell("0.003")
    flows.deposit(paid, 1)
    flows.deposit(paid, REQUIRED)
    use_cases.settlement.pay_out("demo", paid.code)
    no_payouts = flows.sell("0.004", partner="other")
    flows.deposit(no_payouts, REQUIRED)
    blocked = flows.sell("0.001")
    flows.deposit(blocked, REQUIRED, Decimal("0.0009"))
    fee = use_cases.ledger.settings.cryptos["BTC"].network_fee
    quote = {t.code: t.order.quote for t in (sent, open_buy, to_payout, paid)}
    demo = {
        "hot": Decimal(5 - 2)
        - quote[sent.code].crypto_amount
        - fee
        + sum(quote[t.code].crypto_amount for t in (to_payout, paid))
        + Decimal("0.0009"),
        "hot_locked": quote[open_buy.code].crypto_amount + fee,
        "unconfirmed": seen.order.quote.crypto_amount,
        "bank": 10000 + quote[sent.code].fiat_value - quote[paid.code].fiat_value,
        "bank_locked": quote[to_payout.code].fiat_value,
        "cold": Decimal(2),
    }
    other = {
        "hot": no_payouts.order.quote.crypto_amount,
        "hot_locked": Decimal(0),
        "unconfirmed": Decimal(0),
        "bank": -no_payouts.order.quote.fiat_value,  # paid out before any opening balance: below zero
        "bank_locked": Decimal(0),
        "cold": Decimal("0.5"),
    }
    return {"demo": demo, "other": other}


def sums_per_currency(conn: psycopg.Connection, schema: str) -> dict[str, Decimal]:
    rows = conn.execute(
        f'SELECT currency_code, sum(debit - credit) FROM "{schema}".postings GROUP BY 1'
    ).fetchall()
    return dict(rows)


def sums_per_partner(conn: psycopg.Connection, schema: str) -> dict[tuple[str, str], Decimal]:
    rows = conn.execute(
        f'SELECT partner, currency_code, sum(debit - credit) FROM "{schema}".postings GROUP BY 1, 2'
    ).fetchall()
    return {(partner, currency): total for partner, currency, total in rows}


def check_reserves(conn: psycopg.Connection, schema: str, partner: str, expected: dict[str, Decimal]) -> None:
    found = {(p.name, p.code): p for p in read_positions(conn, partner, ALWAYS, schema)}
    assert set(found) == {("hot-wallet", "BTC"), ("hot-wallet", "ETH"), ("bank", "EUR"), ("cold-1", "BTC")}
    hot, bank, cold = found["hot-wallet", "BTC"], found["bank", "EUR"], found["cold-1", "BTC"]
    assert (hot.type, hot.total, hot.locked, hot.unconfirmed) == (
        "HotWallet",
        expected["hot"],
        expected["hot_locked"],
        expected["unconfirmed"],
    )
    assert hot.available == expected["hot"] - expected["hot_locked"]
    assert (bank.type, bank.total, bank.locked, bank.unconfirmed) == (
        "Exchange",
        expected["bank"],
        expected["bank_locked"],
        0,
    )
    assert (cold.type, cold.total, cold.locked) == ("ColdStore", expected["cold"], 0)
    eth = found["hot-wallet", "ETH"]
    assert (eth.total, eth.updated) == (0, None)


def test_postings_balance_and_each_partners_reserves_follow_its_own_flows(
    make_use_cases: Callable[..., UseCases],
    addresses: Any,
    view: Postings,
    conn: psycopg.Connection,
    schema: str,
) -> None:
    use_cases = make_use_cases()
    ledger = use_cases.ledger
    expected = drive(use_cases, addresses)
    head = replay(ledger, POSTINGS, view)
    assert head == ledger.recorder.max_notification_id() == read_position(conn, schema)
    assert set(sums_per_currency(conn, schema).values()) == {Decimal(0)}
    assert {partner for partner, _ in sums_per_partner(conn, schema)} == {"demo", "other"}
    assert set(sums_per_partner(conn, schema).values()) == {Decimal(0)}
    check_reserves(conn, schema, "demo", expected["demo"])
    check_reserves(conn, schema, "other", expected["other"])
    stranger = {(p.name, p.code): p.total for p in read_positions(conn, "nobody", ALWAYS, schema)}
    assert stranger == {key: 0 for key in ALWAYS}  # a partner without postings: its built-ins, empty


def test_a_view_rebuilt_from_the_first_event_equals_the_one_built_step_by_step(
    make_use_cases: Callable[..., UseCases],
    addresses: Any,
    view: Postings,
    conn: psycopg.Connection,
    schema: str,
) -> None:
    use_cases = make_use_cases()
    ledger = use_cases.ledger
    drive(use_cases, addresses)
    head = ledger.recorder.max_notification_id()
    for stop in range(1, head + 1, 7):
        replay(ledger, POSTINGS, view, stop_at=stop)
        assert set(sums_per_currency(conn, schema).values()) <= {Decimal(0)}  # after every few events
    replay(ledger, POSTINGS, view)
    live = [dump(conn, schema, table) for table in view.tables]
    view.reset()
    assert read_position(conn, schema) == 0
    replay(ledger, POSTINGS, view)
    assert [dump(conn, schema, table) for table in view.tables] == live


def dump(conn: psycopg.Connection, schema: str, table: str) -> list[tuple[Any, ...]]:
    return conn.execute(f'SELECT * FROM "{schema}"."{table}" ORDER BY 1, 2, 3').fetchall()


def test_an_unbalanced_posting_is_refused_and_nothing_of_it_is_written(
    make_use_cases: Callable[..., UseCases],
    addresses: Any,
    view: Postings,
    conn: psycopg.Connection,
    schema: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    use_cases = make_use_cases()
    ledger = use_cases.ledger
    flows = Flows(use_cases, addresses)
    flows.buy("100")
    monkeypatch.setattr(rules, "buy_committed", lambda deal: [rules.debit("trading", "EUR", Decimal(1))])
    with pytest.raises(ProjectionFailed) as failed:
        replay(ledger, POSTINGS, view)
    assert isinstance(failed.value.__cause__, UnbalancedPosting)
    assert read_position(conn, schema) < ledger.recorder.max_notification_id()  # stopped at the commit
    assert dump(conn, schema, "postings") == []


def test_a_read_waits_for_the_view_to_reach_the_writes_made_before_it(
    make_use_cases: Callable[..., UseCases], view: Postings, conn: psycopg.Connection, schema: str
) -> None:
    use_cases = make_use_cases()
    ledger = use_cases.ledger
    adjust(use_cases, "OpeningBalance", "ETH", "1.5", ("hot-wallet", "HotWallet"))
    head = ledger.recorder.max_notification_id()
    assert not wait_for_position(conn, head, timeout=0.05, schema=schema)
    replay(ledger, POSTINGS, view)
    assert wait_for_position(conn, head, timeout=0.05, schema=schema)
    [eth] = [p for p in read_positions(conn, "demo", ALWAYS, schema) if p.code == "ETH"]
    assert (eth.total, eth.available) == (Decimal("1.5"), Decimal("1.5"))


SHARED_BOOK_TABLES = """
    DROP TABLE "{schema}".balances, "{schema}".reserve_places;
    CREATE TABLE "{schema}".balances (account text NOT NULL, currency_code text NOT NULL,
        debit numeric NOT NULL, credit numeric NOT NULL, balance numeric NOT NULL,
        updated timestamptz NOT NULL, notification_id bigint NOT NULL, PRIMARY KEY (account, currency_code));
    INSERT INTO "{schema}".balances VALUES ('reserve:hot-wallet', 'BTC', 7, 0, 7, now(), 1);
    CREATE TABLE "{schema}".reserve_places (name text PRIMARY KEY, type text NOT NULL,
        created timestamptz NOT NULL);
"""


def columns(conn: psycopg.Connection, schema: str, table: str) -> list[str]:
    rows = conn.execute(
        "SELECT column_name FROM information_schema.columns WHERE table_schema = %s AND table_name = %s "
        "ORDER BY ordinal_position",
        (schema, table),
    ).fetchall()
    return [name for (name,) in rows]


def test_tables_of_one_book_for_every_partner_are_dropped_and_built_again_per_partner_from_the_log(
    make_use_cases: Callable[..., UseCases],
    addresses: Any,
    database_url: str,
    conn: psycopg.Connection,
    schema: str,
) -> None:
    use_cases = make_use_cases()
    ledger = use_cases.ledger
    expected = drive(use_cases, addresses)
    first = open_view(database_url, POSTINGS, schema=schema)
    replay(ledger, POSTINGS, first)
    first.datastore.close()
    conn.execute(SHARED_BOOK_TABLES.format(schema=schema))  # as a database written before per-partner books
    assert "partner" not in columns(conn, schema, "balances")

    reopened = open_view(database_url, POSTINGS, schema=schema)
    try:
        assert columns(conn, schema, "balances")[:2] == ["partner", "account"]
        assert columns(conn, schema, "reserve_places")[:2] == ["partner", "name"]
        assert read_position(conn, schema) == 0
        assert dump(conn, schema, "balances") == dump(conn, schema, "postings") == []
        replay(ledger, POSTINGS, reopened)
    finally:
        reopened.datastore.close()
    check_reserves(conn, schema, "demo", expected["demo"])
    check_reserves(conn, schema, "other", expected["other"])
