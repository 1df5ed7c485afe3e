"""Conservation under concurrency: while buys, sells (paid by deposits reported on chain), payouts and the
operator's reserve moves run at once over HTTP, an auditor thread takes snapshot after snapshot of the
postings read model, each in one REPEATABLE READ transaction. In every snapshot the books balance per
currency and partner, the balances equal their postings, no account is on the wrong side and no funded
reserve goes negative (see `books`). At the end, once the postings have caught up, each of partner demo's
reserves moved by exactly what its flows moved (nothing was posted twice or lost), what was locked or
unconfirmed is released, and no other partner's reserve moved at all (reserves are each partner's own book).
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Callable
from decimal import Decimal

import psycopg

from tests.e2e.support import Api, expect
from tests.resilience.books import Auditor, Snapshot, snapshot_connection, take_snapshot
from tests.resilience.conftest import Service
from tests.resilience.load import customers_for
from tests.resilience.trading import (
    BANK,
    HOT,
    Expected,
    Traders,
    adjustment,
    buy_and_send_out,
    move_and_back,
    sell_and_pay_out,
)

PARTNER = "demo"  # whose clients trade and move reserves
FUNDING = ((HOT, "BTC", Decimal(100)), (BANK, "EUR", Decimal(1_000_000)))
CATCH_UP_SECONDS = 30.0
BUYERS = 2
SELLERS = 2


def fund_the_reserves(operator: Api) -> None:
    """Opening balances far above what the flows move, so no reserve has a reason to go negative."""
    for reserve, asset, amount in FUNDING:
        expect(
            operator.post_json("/reserves/adjustments", adjustment("OpeningBalance", asset, amount, reserve)),
            201,
        )


def caught_up_snapshot(database_url: str) -> Snapshot:
    """A snapshot taken once the postings have processed every event recorded so far."""
    with psycopg.connect(database_url, autocommit=True, connect_timeout=10) as connection:
        head = connection.execute(
            "SELECT coalesce(max(notification_id), 0) FROM ledger.ledger_events"
        ).fetchone()[0]
    deadline = time.monotonic() + CATCH_UP_SECONDS
    with snapshot_connection(database_url) as connection:
        snapshot = take_snapshot(connection)
        while snapshot.position < head and time.monotonic() < deadline:
            time.sleep(0.1)
            snapshot = take_snapshot(connection)
    assert snapshot.position >= head, f"the postings stayed at {snapshot.position}, behind the log's {head}"
    return snapshot


def start_flows(traders: Traders, service: Service, stack: contextlib.ExitStack, expected: Expected) -> None:
    """Buyers (every third buy staged first), sellers (every fifth sell BLOCKED) and a mover, each thread
    with its own clients and customer."""

    def client(client_id: str = "demo-broker") -> Api:
        api = service.client(client_id)
        stack.callback(api.close)
        return api

    def clients() -> tuple[Api, Api]:
        return client(), client("demo-operator")

    customers = customers_for(client(), BUYERS + SELLERS)
    flows: list[Callable[[int], None]] = []
    for customer in customers[:BUYERS]:
        b, o = clients()
        flows.append(lambda n, b=b, o=o, c=customer: buy_and_send_out(b, o, c, expected, staged=n % 3 == 0))
    for customer in customers[BUYERS:]:
        b, o = clients()
        flows.append(lambda n, b=b, o=o, c=customer: sell_and_pay_out(b, o, c, expected, block=n % 5 == 4))
    _, mover = clients()
    cold = (f"cold-{uuid.uuid4().hex[:8]}", "ColdStore")
    flows.append(lambda n: move_and_back(mover, cold, expected))
    for flow in flows:
        traders.start(flow)


def check_reserves_moved_as_the_flows(before: Snapshot, after: Snapshot, expected: Expected) -> None:
    for key in before.reserves.keys() | after.reserves.keys():
        old, new = before.reserves.get(key), after.reserves.get(key)
        old_total, new_total = (old.total if old else 0), (new.total if new else 0)
        partner, reserve = key[0], key[1:]
        should = expected.totals.get(reserve, 0) if partner == PARTNER else 0
        assert new_total - old_total == should, (key, old, new, should)
        assert (new.locked if new else 0) == (old.locked if old else 0), (key, old, new)
        assert (new.unconfirmed if new else 0) == (old.unconfirmed if old else 0), (key, old, new)


def test_the_books_balance_and_no_reserve_goes_negative_in_any_snapshot_under_concurrent_trading(
    service: Service, load_seconds: float, report
) -> None:
    with service.client("demo-operator") as operator:
        fund_the_reserves(operator)
    before = caught_up_snapshot(service.database_url)
    assert not before.problems, before.problems[:10]
    expected, traders, auditor = Expected(), Traders(), Auditor(service.database_url)
    with contextlib.ExitStack() as stack:
        start_flows(traders, service, stack, expected)
        auditor.start()
        time.sleep(load_seconds)
        traders.stop()
        auditor.stop()
    assert not traders.errors, f"{len(traders.errors)} flows failed: {traders.errors[:3]}"
    assert not auditor.errors, auditor.errors
    assert auditor.taken > 0
    assert not auditor.problems, auditor.problems[:10]
    after = caught_up_snapshot(service.database_url)
    assert not after.problems, after.problems[:10]
    check_reserves_moved_as_the_flows(before, after, expected)
    report(
        seconds=load_seconds,
        snapshots=auditor.taken,
        postings_in_last_snapshot=after.postings,
        flows=dict(expected.flows),
        hot_wallet_btc_moved=expected.totals.get(("hot-wallet", "BTC"), 0),
        bank_eur_moved=expected.totals.get(("bank", "EUR"), 0),
    )
