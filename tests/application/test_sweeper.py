"""The background sweeper cancels overdue transactions by itself and keeps running through failures."""

from __future__ import annotations

import time
from collections.abc import Callable
from decimal import Decimal

from application.commands import BuyRequest
from application.ledger import Ledger
from application.sweeper import ExpirySweeper
from domain.transaction import Status
from tests.application.conftest import FakeClock


def wait_for(condition: Callable[[], bool], seconds: float = 10) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return False


def test_the_sweeper_cancels_a_staged_buy_once_it_is_overdue(
    ledger: Ledger, clock: FakeClock, active_customer_with_btc_account: Callable
) -> None:
    _, account = active_customer_with_btc_account("demo", "sweep-1")
    buy = BuyRequest("sweep-1", "EUR", "BTC", Decimal(100), account.customer_address, "BANK_EUR_BUY")
    staged = ledger.create_buy("demo", buy, stage=True)
    sweeper = ExpirySweeper(ledger, interval_seconds=0.05)
    sweeper.start()
    try:
        time.sleep(0.3)
        assert ledger.transaction("demo", staged.code).status == Status.STAGED
        clock.advance(minutes=31)
        assert wait_for(lambda: ledger.transaction("demo", staged.code).status == Status.CANCELLED)
    finally:
        sweeper.stop()


def test_a_failing_sweep_does_not_stop_the_sweeper(ledger: Ledger) -> None:
    calls: list[int] = []

    def failing_then_working() -> list[str]:
        calls.append(1)
        if len(calls) == 1:
            raise ConnectionError("database down")
        return []

    ledger.expire_overdue = failing_then_working  # type: ignore[method-assign]
    sweeper = ExpirySweeper(ledger, interval_seconds=0.02)
    sweeper.start()
    try:
        assert wait_for(lambda: len(calls) >= 3)
    finally:
        sweeper.stop()
