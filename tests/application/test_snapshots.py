"""Aggregates whose history only grows load from their latest snapshot plus the events since: the deposit
address pool (every sell) and the customers' limit windows (every buy and sell)."""

from __future__ import annotations

from decimal import Decimal

from application.commands import BuyRequest
from domain.deposits import AddressPool
from domain.limits import LimitWindow, period_key


def test_the_address_pool_is_snapshotted_every_hundred_versions_and_loads_from_the_latest(make_ledger):
    ledger = make_ledger()
    pool = AddressPool("BTC")
    for n in range(250):
        pool.allocate(f"sell:demo:TX{n}")
        ledger.save(pool)
    snapshots = list(ledger.snapshots.get(pool.id, desc=True))
    assert [s.originator_version for s in snapshots] == [200, 100]
    loaded = ledger.store.address_pool("BTC")
    assert (loaded.version, loaded.next_index) == (251, 250)


def test_a_busy_customers_limit_window_loads_from_its_snapshot_and_counts_every_reservation(
    ledger, active_customer_with_btc_account, clock
):
    _, account = active_customer_with_btc_account("demo", "busy", "Plus")
    request = BuyRequest("busy", "EUR", "BTC", Decimal("10.01"), account.customer_address, "BANK_EUR_BUY")
    codes = [ledger.create_buy("demo", request, stage=False).code for _ in range(40)]

    window_id = LimitWindow.create_id("demo", "busy", "buy", period_key("monthly", clock.now()))
    snapshots = list(ledger.snapshots.get(window_id, desc=True))
    assert [s.originator_version for s in snapshots] == [32, 16]
    read = ledger.recorder.select_events_of([window_id], ledger.snapshots.recorder.events_table_name)
    assert [stored.originator_version for stored in read] == [32, *range(33, 42)]
    window = ledger.store.find(window_id)
    assert (window.version, window.used) == (41, Decimal("400.40"))
    assert sorted(window.reservations) == sorted(codes)
    usage = {(u.direction, u.period): u for u in ledger.limits("demo", "busy")}
    assert usage["buy", "monthly"].used == usage["buy", "daily"].used == Decimal("400.40")
