"""The operator's way out for blocked and late money, over HTTP (issue 39, contract-notes.md "Resolving
blocked sells and late payments"): a BLOCKED sell's amount accepted (priced again at its quote, limits
taken again) or refunded; a late payment refunded; a refund the network fee would eat kept at once. Each
path ends with the books balanced and `audit verify` passing, and every other state is refused with 409.

The real app in-process with its projections, on a database of its own, with a clock the tests move."""

from __future__ import annotations

import time
from datetime import datetime
from decimal import Decimal
from typing import Any

import pytest

from application.settings import DEFAULT_SETTINGS, load_settings
from application.sweeper import OverdueTransactions
from bench.clock import FakeClock
from projections.audit import verify
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

HOOK = "http://localhost:9/resolutions"  # allow-listed; nothing listens on the discard port
SETTINGS = load_settings(DEFAULT_SETTINGS)
BTC = SETTINGS.cryptos["BTC"]
REQUIRED = BTC.required_confirmations

CLOCK = FakeClock()
client = in_process_app(
    projections=True, own_database="broker_resolutions", settings=local_callback_settings(), clock=CLOCK
)


class Desk:
    """The app's test client and each role's headers, for partner demo (Payouts) or other (none)."""

    def __init__(self, client: InProcessClient, partner: str) -> None:
        self.client = client
        self.broker = client.headers_of(f"{partner}-broker")
        self.operator = client.headers_of(f"{partner}-operator")

    def answer(self, method: str, path: str, headers: dict[str, str], body: Any = None) -> Any:
        return self.client.request(method, path, json=body, headers=headers)

    def call(self, method: str, path: str, headers: dict[str, str], body: Any = None) -> Any:
        answer = self.answer(method, path, headers, body)
        assert answer.status_code < 300, answer.text
        return answer.json()

    def customer(self, addresses: AddressSource) -> Customer:
        calls = RoleCalls(self.client, {"broker": self.broker})
        return calls.active_customer("broker", unique_code("resolve"), addresses())

    def sell(self, customer: Customer, amount: str = "0.002") -> dict[str, Any]:
        body = sell_body(customer, cryptoAmount=float(amount), callbackUrl=HOOK)
        return self.call("POST", "/paymentrequest/brokersell", self.broker, body)["transaction"]

    def deposit(self, sell: dict[str, Any], amount: Decimal) -> dict[str, Any]:
        report = deposit_report(sell, REQUIRED, float(amount))
        return self.call("POST", "/chain/deposits", self.operator, report)["transaction"]

    def resolve(self, code: str, status: int = 200, **body: Any) -> Any:
        body.setdefault("reason", "decided with the customer by phone")
        answer = self.answer("POST", f"/transactions/custodian/{code}/resolution", self.operator, body)
        assert answer.status_code == status, answer.text
        return answer.json()["transaction"] if status == 200 else answer.json()

    def refund_sent(self, code: str, confirmations: int) -> dict[str, Any]:
        report = {"transactionCode": code, "txId": f"refund-{code}", "confirmations": confirmations}
        return self.call("POST", "/chain/sendouts", self.operator, report)["transaction"]

    def sell_used(self, customer: Customer, as_of: datetime | None = None) -> Decimal:
        query = f"?asOf={as_of.isoformat().replace('+00:00', 'Z')}" if as_of else ""
        limits = self.call("GET", f"/customer/{customer.code}/limits{query}", self.broker)["limits"]
        [daily] = [e for e in limits if (e["direction"], e["period"]) == ("sell", "daily")]
        return Decimal(str(daily["used"]))

    def hot_wallet(self) -> tuple[Decimal, Decimal]:
        reserves = self.call("GET", "/reserves", self.broker)["cryptoReserves"]
        [hot] = [r for r in reserves if (r["name"], r["code"]) == ("hot-wallet", "BTC")]
        return Decimal(str(hot["total"])), Decimal(str(hot["locked"]))

    def events(self, code: str) -> list[str]:
        history = self.call("GET", f"/transactions/custodian/{code}/history", self.broker)
        return [event["type"] for event in history["events"]]

    def actors(self, code: str) -> dict[str, dict[str, str]]:
        history = self.call("GET", f"/transactions/custodian/{code}/history", self.broker)
        return {event["type"]: event["actor"] for event in history["events"]}

    def called_back(self, code: str, count: int) -> list[str]:
        deadline = time.monotonic() + 10
        while True:
            path = f"/transactions/custodian/{code}/callbacks"
            found = self.call("GET", path, self.broker)["deliveries"]
            if len(found) >= count or time.monotonic() > deadline:
                return [delivery["transactionStatus"] for delivery in found]
            time.sleep(0.05)


@pytest.fixture(scope="module")
def demo(client: InProcessClient) -> Desk:
    return Desk(client, "demo")


@pytest.fixture(scope="module")
def other(client: InProcessClient) -> Desk:
    return Desk(client, "other")


@pytest.fixture(scope="module")
def addresses() -> AddressSource:
    return AddressSource()


def books_balance_and_audit_passes(client: InProcessClient) -> None:
    report = verify(client.database_url)
    assert report.ok, [(check.name, check.details) for check in report.checks if check.failed]


def amount(value: Any) -> Decimal:
    return Decimal(str(value))


def test_an_accepted_blocked_sell_is_priced_again_at_its_quote_and_paid_out(
    demo: Desk, addresses: AddressSource, client: InProcessClient
) -> None:
    customer = demo.customer(addresses)
    sell = demo.sell(customer)
    code, quoted = sell["transactionCode"], sell["executedAmounts"]
    assert demo.deposit(sell, Decimal("0.0015"))["status"] == "BLOCKED"
    blocked_at = CLOCK.at
    CLOCK.advance(seconds=10)

    accepted = demo.resolve(code, resolution="AcceptReceived")

    assert accepted["status"] == "ToPayout"
    executed = accepted["executedAmounts"]
    assert amount(executed["cryptoAmount"]) == Decimal("0.0015")
    assert amount(executed["cryptoPrice"]) == amount(quoted["cryptoPrice"])
    assert amount(executed["fiatValue"]) < amount(quoted["fiatValue"])
    assert accepted["resolution"]["resolution"] == "AcceptReceived"
    assert accepted["resolution"]["reason"] == "decided with the customer by phone"
    assert demo.sell_used(customer) == amount(executed["fiatValue"])  # EUR is the base currency
    assert demo.sell_used(customer, as_of=blocked_at) == amount(quoted["fiatValue"])  # before, the quote's
    paid = demo.call("PUT", f"/transactions/custodian/{code}/payout", demo.operator)["transaction"]
    assert paid["status"] == "COMPLETED" and paid["executedAmounts"] == executed
    assert demo.events(code) == ["Initiated", "Blocked", "ReceivedAccepted", "PaidOut"]
    assert demo.called_back(code, 4) == ["Initiated", "BLOCKED", "ToPayout", "COMPLETED"]
    shown = demo.call("GET", f"/transactions/custodian/{code}", demo.broker)["transaction"]
    assert shown == paid
    books_balance_and_audit_passes(client)


def test_without_payouts_an_accepted_blocked_sell_completes_at_once(
    other: Desk, addresses: AddressSource, client: InProcessClient
) -> None:
    customer = other.customer(addresses)
    sell = other.sell(customer)
    other.deposit(sell, Decimal("0.0025"))

    accepted = other.resolve(sell["transactionCode"], resolution="AcceptReceived")

    assert accepted["status"] == "COMPLETED"
    assert amount(accepted["executedAmounts"]["cryptoAmount"]) == Decimal("0.0025")
    books_balance_and_audit_passes(client)


def test_a_refunded_blocked_sell_is_refunding_until_its_sendout_is_confirmed(
    demo: Desk, addresses: AddressSource, client: InProcessClient
) -> None:
    customer = demo.customer(addresses)
    sell = demo.sell(customer)
    code = sell["transactionCode"]
    demo.deposit(sell, Decimal("0.0031"))
    total_before, locked_before = demo.hot_wallet()

    refunding = demo.resolve(code, resolution="Refund")

    resolution = refunding["resolution"]
    assert refunding["status"] == "Refunding"
    assert resolution["refundAddress"] == customer.address  # the account's withdraw address
    assert amount(resolution["refundCryptoAmount"]) == Decimal("0.0031") - BTC.network_fee
    assert amount(resolution["refundNetworkFee"]) == BTC.network_fee
    assert demo.sell_used(customer) == 0  # the sell did not happen: its limit is given back
    total, locked = demo.hot_wallet()
    assert (total, locked - locked_before) == (total_before, Decimal("0.0031"))  # owed back: locked
    assert demo.refund_sent(code, REQUIRED - 1)["status"] == "Refunding"
    refunded = demo.refund_sent(code, REQUIRED)
    assert refunded["status"] == "REFUNDED"
    assert refunded["resolution"]["refundBlockchainTransactionId"] == f"refund-{code}"
    assert demo.refund_sent(code, REQUIRED + 1)["status"] == "REFUNDED"  # a later report changes nothing
    assert demo.hot_wallet() == (total_before - Decimal("0.0031"), locked_before)
    assert demo.events(code) == ["Initiated", "Blocked", "RefundStarted", "RefundSendoutSeen", "Refunded"]
    assert demo.called_back(code, 4) == ["Initiated", "BLOCKED", "Refunding", "REFUNDED"]
    books_balance_and_audit_passes(client)


def test_a_late_payment_is_refunded_to_the_address_the_operator_names(
    demo: Desk, addresses: AddressSource, client: InProcessClient
) -> None:
    customer = demo.customer(addresses)
    sell = demo.sell(customer)
    code = sell["transactionCode"]
    CLOCK.advance(minutes=30, seconds=1)  # past validUntil
    runtime = client.app.state.runtime
    assert code in OverdueTransactions(runtime.ledger, runtime.use_cases.settlement).expire_overdue()
    assert demo.deposit(sell, Decimal("0.002"))["status"] == "CANCELLED"
    elsewhere = addresses()

    refunding = demo.resolve(code, resolution="Refund", refundAddress=elsewhere)

    assert (refunding["status"], refunding["resolution"]["refundAddress"]) == ("Refunding", elsewhere)
    assert demo.refund_sent(code, REQUIRED)["status"] == "REFUNDED"
    assert demo.events(code) == ["Initiated", "Cancelled", "PaidLate", "RefundStarted", "Refunded"]
    actors = demo.actors(code)
    assert actors["Cancelled"] == {"kind": "service", "component": "expiry-sweeper"}
    assert (actors["RefundStarted"]["client"], actors["RefundStarted"]["roles"]) == (
        "demo-operator",
        "operator",
    )
    books_balance_and_audit_passes(client)


def test_a_refund_the_network_fee_would_eat_is_refunded_at_once_and_kept(
    demo: Desk, addresses: AddressSource, client: InProcessClient
) -> None:
    customer = demo.customer(addresses)
    sell = demo.sell(customer)
    code = sell["transactionCode"]
    demo.deposit(sell, BTC.network_fee)  # exactly the fee: nothing left to send

    refunded = demo.resolve(code, resolution="Refund")

    assert refunded["status"] == "REFUNDED"
    assert amount(refunded["resolution"]["refundCryptoAmount"]) == 0
    assert amount(refunded["resolution"]["refundNetworkFee"]) == BTC.network_fee
    assert demo.events(code) == ["Initiated", "Blocked", "RefundNotSent"]
    refused = demo.answer(
        "POST",
        "/chain/sendouts",
        demo.operator,
        {"transactionCode": code, "txId": f"refund-{code}", "confirmations": REQUIRED},
    )
    assert (refused.status_code, refused.json()["code"]) == (409, "invalid_state_transition")
    books_balance_and_audit_passes(client)


def test_a_resolution_from_any_other_state_is_a_conflict(demo: Desk, addresses: AddressSource) -> None:
    customer = demo.customer(addresses)
    initiated = demo.sell(customer)["transactionCode"]
    buy = demo.call("POST", "/brokerbuy", demo.broker, buy_body(customer, fiatValue=100))["transaction"][
        "transactionCode"
    ]
    resolved = demo.sell(customer)
    demo.deposit(resolved, Decimal("0.0019"))
    demo.resolve(resolved["transactionCode"], resolution="Refund")

    for code in (initiated, buy, resolved["transactionCode"]):
        for resolution in ("AcceptReceived", "Refund"):
            problem = demo.resolve(code, 409, resolution=resolution)
            assert problem["code"] == "invalid_state_transition", problem


def test_accepting_more_than_the_customer_may_sell_is_refused_and_leaves_it_blocked(
    demo: Desk, addresses: AddressSource
) -> None:
    customer = demo.customer(addresses)
    sell = demo.sell(customer)
    demo.deposit(sell, Decimal("0.5"))  # far above the Basic level's daily sell limit

    problem = demo.resolve(sell["transactionCode"], 422, resolution="AcceptReceived")

    assert problem["code"] == "trust_level_limit_exceeded"
    shown = demo.call("GET", f"/transactions/custodian/{sell['transactionCode']}", demo.broker)
    assert shown["transaction"]["status"] == "BLOCKED"


def test_a_resolution_is_the_operators_and_says_what_is_wrong_with_its_body(
    demo: Desk, addresses: AddressSource
) -> None:
    customer = demo.customer(addresses)
    sell = demo.sell(customer)
    code = sell["transactionCode"]
    demo.deposit(sell, Decimal("0.0017"))
    body = {"resolution": "Refund", "reason": "customer asked"}

    as_broker = demo.answer("POST", f"/transactions/custodian/{code}/resolution", demo.broker, body)
    assert as_broker.status_code == 403
    assert demo.resolve(code, 422, resolution="AcceptReceived", refundAddress=customer.address)["code"] == (
        "validation_failed"
    )
    assert demo.resolve(code, 422, resolution="Refund", refundAddress="not-an-address")["code"] == (
        "crypto_address_invalid"
    )
    assert demo.resolve(code, 422, resolution="Refund", reason="")["code"] == "validation_failed"
    assert demo.resolve(code, 422, resolution="Keep")["code"] == "validation_failed"
    other_partner = demo.client.headers_of("other-operator")
    elsewhere = demo.answer("POST", f"/transactions/custodian/{code}/resolution", other_partner, body)
    assert elsewhere.status_code == 404
    assert demo.call("GET", f"/transactions/custodian/{code}", demo.broker)["transaction"]["status"] == (
        "BLOCKED"
    )
