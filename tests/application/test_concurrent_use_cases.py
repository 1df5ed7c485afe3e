"""Uniqueness and single-use rules under concurrent requests on one shared `Ledger`."""

from __future__ import annotations

from decimal import Decimal

from application.commands import BuyRequest, SellRequest
from application.sweeper import OverdueTransactions
from domain.customer import Customer
from domain.errors import CustomerAlreadyExists
from domain.transaction import Status, Transaction
from tests.application.conftest import open_btc_account, race, register_active

THREADS = 10


def test_concurrent_registrations_of_one_code_create_exactly_one_customer(make_use_cases, pooled_env):
    use_cases = make_use_cases(pooled_env)
    ledger = use_cases.ledger
    outcomes = race(THREADS, lambda i: use_cases.customers.register_customer("demo", "alice", "Basic"))
    assert sum(isinstance(o, Customer) for o in outcomes) == 1
    assert sum(isinstance(o, CustomerAlreadyExists) for o in outcomes) == THREADS - 1
    assert ledger.store.customer("demo", "alice").version == 1


def test_concurrent_openings_of_one_address_open_exactly_one_account(make_use_cases, pooled_env, addresses):
    use_cases = make_use_cases(pooled_env)
    ledger = use_cases.ledger
    register_active(use_cases, "demo", "alice")
    customer_address = addresses.next()
    outcomes = race(THREADS, lambda i: use_cases.customers.open_account("demo", "alice", customer_address))
    assert sorted(created for _, created in outcomes) == [False] * (THREADS - 1) + [True]
    assert len({account.code for account, _ in outcomes}) == 1
    assert len(ledger.store.customer("demo", "alice").account_codes) == 1


def test_concurrent_sells_each_get_their_own_deposit_address(make_use_cases, pooled_env, addresses):
    use_cases = make_use_cases(pooled_env)
    register_active(use_cases, "demo", "alice", "Plus")
    account = open_btc_account(use_cases, "demo", "alice", addresses.next())
    request = SellRequest(
        customer_code="alice",
        account_code=account.code,
        currency="EUR",
        crypto="BTC",
        payment_method="BANK_EUR_SELL",
        fiat_value=Decimal("20"),
    )
    sells = race(2 * THREADS, lambda i: use_cases.sells.create("demo", request))
    assert all(isinstance(s, Transaction) for s in sells), sells
    assert len({s.order.destination_address for s in sells} | {account.deposit_address}) == 2 * THREADS + 1
    assert len({s.order.deposit_path for s in sells}) == 2 * THREADS


def test_concurrent_creates_with_one_code_record_one_buy_and_reserve_once(
    make_use_cases, pooled_env, addresses
):
    use_cases = make_use_cases(pooled_env)
    register_active(use_cases, "demo", "alice")
    address = addresses.next()
    open_btc_account(use_cases, "demo", "alice", address)
    request = BuyRequest("alice", "EUR", "BTC", Decimal("400"), address, "BANK_EUR_BUY")
    outcomes = race(THREADS, lambda i: use_cases.buys.create("demo", request, stage=True, code="TX-ONCE"))
    assert all(isinstance(o, Transaction) for o in outcomes), outcomes
    assert {(o.code, o.version) for o in outcomes} == {("TX-ONCE", 1)}
    [daily] = [
        u for u in use_cases.limits.usage("demo", "alice") if (u.direction, u.period) == ("buy", "daily")
    ]
    assert daily.used == Decimal("400")


def test_concurrent_sweeps_cancel_each_overdue_transaction_once(make_use_cases, pooled_env, addresses, clock):
    writer = make_use_cases(pooled_env)
    register_active(writer, "demo", "alice", "Plus")
    address = addresses.next()
    open_btc_account(writer, "demo", "alice", address)
    request = BuyRequest(
        customer_code="alice",
        currency="EUR",
        crypto="BTC",
        fiat_value=Decimal("10"),
        destination_address=address,
        payment_method="BANK_EUR_BUY",
    )
    for _ in range(3):
        staged = {writer.buys.create("demo", request, stage=True).code for _ in range(10)}
        clock.advance(minutes=31)
        # fresh, as a server's would be after a restart
        fresh = make_use_cases(pooled_env)
        sweeper = OverdueTransactions(fresh.ledger, fresh.settlement)

        outcomes = race(THREADS // 2, lambda i, s=sweeper: s.expire_overdue())

        assert [o for o in outcomes if isinstance(o, Exception)] == []
        expired = [code for codes in outcomes for code in codes]
        assert sorted(expired) == sorted(staged)
        assert {writer.ledger.store.transaction("demo", code).status for code in staged} == {Status.CANCELLED}
