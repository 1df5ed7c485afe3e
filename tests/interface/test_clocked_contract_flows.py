"""Contract flows that need time to pass, over HTTP (issue 13):

- a sell's payment first seen after its validUntil is late: the sell is CANCELLED (expired), whether or not
  the expiry sweep ran, and the payment is recorded against it to refund, never paid out at the expired quote;
- a payment first seen before validUntil is paid out when confirmed after it;
- a buy created without `stage` is first called back as Sending.

They run on the real app in-process (litestar's test client, real PostgreSQL, projections on) with a settable
clock in the ledger, on a database of its own. The flows that need no clock are in
`tests/e2e/test_contract_flows.py`.
"""

from __future__ import annotations

import time
from decimal import Decimal
from typing import Any

import pytest

from application.sweeper import OverdueTransactions
from bench.clock import FakeClock
from tests.e2e.support import (
    AddressSource,
    Customer,
    buy_body,
    deposit_report,
    local_callback_settings,
    sell_body,
    unique_code,
)
from tests.in_process import InProcessClient, RoleCalls, in_process_app

HOOK = "http://localhost:9/contract-flows"  # allow-listed below; nothing listens on the discard port


# --- the app in-process, with a clock the test moves ------------------------------------------------


CLOCK = FakeClock()  # the ledger's time, moved by the tests (tokens keep the real one)
# the app with its projections, on a database of its own, with HOOK's host allowed for callbacks
client = in_process_app(
    projections=True, own_database="broker_flows", settings=local_callback_settings(), clock=CLOCK
)


class AppWithClock:
    """The app's test client, the ledger's clock, and the headers of each client that calls it."""

    def __init__(self, client: InProcessClient, clock: FakeClock) -> None:
        runtime = client.app.state.runtime
        self.client, self.clock, self.ledger, self.settlement = (
            client,
            clock,
            runtime.ledger,
            runtime.use_cases.settlement,
        )
        self.broker = client.headers_of("demo-broker")
        self.operator = client.headers_of("demo-operator")

    def call(self, method: str, path: str, headers: dict[str, str], body: Any = None) -> Any:
        answer = self.client.request(method, path, json=body, headers=headers)
        assert answer.status_code < 300, answer.text
        return answer.json()

    def customer(self, addresses: AddressSource) -> Customer:
        calls = RoleCalls(self.client, {"broker": self.broker})
        return calls.active_customer("broker", unique_code("late"), addresses())


@pytest.fixture(scope="module")
def clocked(client: InProcessClient) -> AppWithClock:
    return AppWithClock(client, CLOCK)


@pytest.fixture(scope="module")
def addresses() -> AddressSource:
    return AddressSource()


def deliveries(app: AppWithClock, code: str, count: int) -> list[dict[str, Any]]:
    """The transaction's callback deliveries once the outbox projection has `count` of them (10 s at most)."""
    deadline = time.monotonic() + 10
    while True:
        found = app.call("GET", f"/transactions/custodian/{code}/callbacks", app.broker)["deliveries"]
        if len(found) >= count or time.monotonic() > deadline:
            return found
        time.sleep(0.05)


def hot_wallet_btc(app: AppWithClock) -> tuple[Decimal, Decimal, Decimal]:
    reserves = app.call("GET", "/reserves", app.broker)
    [hot] = [r for r in reserves["cryptoReserves"] if (r["name"], r["code"]) == ("hot-wallet", "BTC")]
    return Decimal(str(hot["total"])), Decimal(str(hot["locked"])), Decimal(str(hot["available"]))


def sell_used(app: AppWithClock, code: str) -> Decimal:
    limits = app.call("GET", f"/customer/{code}/limits", app.broker)
    [daily] = [e for e in limits["limits"] if (e["direction"], e["period"]) == ("sell", "daily")]
    return Decimal(str(daily["used"]))


@pytest.mark.parametrize("swept_first", [False, True], ids=["before the sweep", "after the sweep"])
def test_a_payment_first_seen_after_valid_until_is_late_and_never_paid_out(
    clocked: AppWithClock, addresses: AddressSource, swept_first: bool
) -> None:
    app = clocked
    customer = app.customer(addresses)
    body = sell_body(customer, cryptoAmount=0.002, callbackUrl=HOOK)
    sell = app.call("POST", "/paymentrequest/brokersell", app.broker, body)["transaction"]
    code, amount = sell["transactionCode"], Decimal(str(sell["executedAmounts"]["cryptoAmount"]))
    assert sell_used(app, customer.code) > 0
    before = hot_wallet_btc(app)

    app.clock.advance(minutes=30, seconds=1)  # one second past validUntil (BANK_EUR_SELL: 30 minutes)
    if swept_first:
        assert code in OverdueTransactions(app.ledger, app.settlement).expire_overdue()
    report = deposit_report(sell, 6, float(amount), tx_id=f"late-{code}")
    late = app.call("POST", "/chain/deposits", app.operator, report)["transaction"]
    assert (late["status"], late["blockchainTransactionId"]) == ("CANCELLED", f"late-{code}")
    assert not swept_first or code not in OverdueTransactions(app.ledger, app.settlement).expire_overdue()

    shown = app.call("GET", f"/transactions/custodian/{code}", app.broker)["transaction"]
    assert (shown["status"], shown["blockchainTransactionId"]) == ("CANCELLED", f"late-{code}")
    history = app.call("GET", f"/transactions/custodian/{code}/history", app.broker)
    events = [event["type"] for event in history["events"]]
    assert events == ["Initiated", *(["Cancelled"] if swept_first else []), "PaidLate"]
    assert history["events"][-1]["data"]["payment"]["tx_id"] == f"late-{code}"
    total, locked, available = hot_wallet_btc(app)  # received, unmatched: in the wallet, owed back
    assert (total - before[0], locked - before[1], available) == (amount, amount, before[2])
    assert sell_used(app, customer.code) == 0  # the expired sell gives its limit back
    callbacks = deliveries(app, code, 2)
    assert [d["transactionStatus"] for d in callbacks] == ["Initiated", "CANCELLED"]  # never ToPayout
    refused = app.client.post(
        "/chain/deposits", json={**report, "txId": f"other-{code}"}, headers=app.operator
    )
    assert (refused.status_code, refused.json()["code"]) == (409, "chain_report_conflict")


def test_a_payment_first_seen_before_valid_until_is_paid_out_when_confirmed_after_it(
    clocked: AppWithClock, addresses: AddressSource
) -> None:
    app = clocked
    customer = app.customer(addresses)
    sell = app.call(
        "POST", "/paymentrequest/brokersell", app.broker, sell_body(customer, cryptoAmount=0.001)
    )["transaction"]
    report = deposit_report(sell, 0, tx_id=f"in-time-{sell['transactionCode']}")
    app.clock.advance(minutes=30)  # validUntil itself is still in time
    seen = app.call("POST", "/chain/deposits", app.operator, report)["transaction"]
    assert seen["status"] == "Confirming"
    app.clock.advance(minutes=5)
    confirmed = app.call("POST", "/chain/deposits", app.operator, {**report, "confirmations": 6})
    assert confirmed["transaction"]["status"] == "ToPayout"


def test_a_buy_created_without_stage_is_first_called_back_as_sending(
    clocked: AppWithClock, addresses: AddressSource
) -> None:
    app = clocked
    customer = app.customer(addresses)
    buy = app.call(
        "POST", "/brokerbuy", app.broker, {**buy_body(customer, 20, callbackUrl=HOOK), "fiatValue": 20}
    )["transaction"]
    assert buy["status"] == "Sending"
    code = buy["transactionCode"]
    app.call(
        "POST", "/chain/sendouts", app.operator, {"transactionCode": code, "txId": code, "confirmations": 6}
    )
    callbacks = deliveries(app, code, 2)
    assert [(d["sequence"], d["transactionStatus"]) for d in callbacks] == [(1, "Sending"), (2, "COMPLETED")]
