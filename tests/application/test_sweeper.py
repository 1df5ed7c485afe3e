"""The background sweeper cancels overdue transactions by itself and keeps running through failures."""

from __future__ import annotations

import time
from collections.abc import Callable
from decimal import Decimal

from application.commands import BuyRequest
from application.ledger import Ledger
from application.sweeper import ExpirySweeper, OverdueTransactions
from application.use_cases import UseCases
from bench.clock import FakeClock
from domain.transaction import Status


def wait_for(condition: Callable[[], bool], seconds: float = 10) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return False


def test_the_sweeper_cancels_a_staged_buy_once_it_is_overdue(
    ledger: Ledger, use_cases: UseCases, clock: FakeClock, active_customer_with_btc_account: Callable
) -> None:
    _, account = active_customer_with_btc_account("demo", "sweep-1")
    buy = BuyRequest("sweep-1", "EUR", "BTC", Decimal(100), account.customer_address, "BANK_EUR_BUY")
    staged = use_cases.buys.create("demo", buy, stage=True)
    sweeper = ExpirySweeper(ledger, use_cases.settlement, interval_seconds=0.05)
    sweeper.start()
    try:
        time.sleep(0.3)
        assert ledger.store.transaction("demo", staged.code).status == Status.STAGED
        clock.advance(minutes=31)
        assert wait_for(lambda: ledger.store.transaction("demo", staged.code).status == Status.CANCELLED)
    finally:
        sweeper.stop()


def test_a_failing_sweep_does_not_stop_the_sweeper(ledger: Ledger, use_cases: UseCases) -> None:
    calls: list[int] = []

    def failing_then_working(batch: int = 500) -> list[str]:
        calls.append(1)
        if len(calls) == 1:
            raise ConnectionError("database down")
        return []

    sweeper = ExpirySweeper(ledger, use_cases.settlement, interval_seconds=0.02)
    sweeper.overdue.expire_overdue = failing_then_working  # type: ignore[method-assign]
    sweeper.start()
    try:
        assert wait_for(lambda: len(calls) >= 3)
    finally:
        sweeper.stop()


def test_a_sweep_visits_only_the_transactions_still_open_at_their_deadline(
    ledger: Ledger, use_cases: UseCases, clock: FakeClock, active_customer_with_btc_account: Callable
) -> None:
    _, account = active_customer_with_btc_account("demo", "sweep-2")
    buy = BuyRequest("sweep-2", "EUR", "BTC", Decimal(100), account.customer_address, "BANK_EUR_BUY")
    committed_at_once = use_cases.buys.create("demo", buy, stage=False)
    staged_then_committed = use_cases.buys.create("demo", buy, stage=True)
    left_staged = use_cases.buys.create("demo", buy, stage=True)
    overdue = OverdueTransactions(ledger, use_cases.settlement)
    assert overdue.expire_overdue() == []
    use_cases.buys.commit("demo", staged_then_committed.code)
    visited: list[str] = []
    settlement = use_cases.settlement
    expire = settlement.expire
    settlement.expire = lambda partner, code: visited.append(code) or expire(partner, code)  # type: ignore[method-assign]

    clock.advance(minutes=31)

    assert overdue.expire_overdue() == [left_staged.code]
    assert visited == [left_staged.code]
    assert ledger.store.transaction("demo", committed_at_once.code).status == Status.SENDING
    assert ledger.store.transaction("demo", staged_then_committed.code).status == Status.SENDING
