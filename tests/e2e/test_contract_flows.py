"""Contract flows a platform relies on, over HTTP (issue 13):

- a sell's payment first seen after its validUntil is late: the sell is CANCELLED (expired), whether or not
  the expiry sweep ran, and the payment is recorded against it to refund, never paid out at the expired quote;
- a buy created without `stage` is Sending in every outward view from the start (its first callback too), and
  its history still lists both of its events, Staged and Committed;
- a simulate refuses exactly what the create with the same body would refuse, and records nothing.

The late payment needs time to pass: it runs on the real app in-process (litestar's test client, real
PostgreSQL, projections on) with a settable clock in the ledger, on a database of its own; the rest runs
against the package's real server.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import psycopg
import pytest
from litestar.testing import TestClient

from application.credentials import VAR_ENV
from application.settings import SETTINGS_ENV
from application.sweeper import OverdueTransactions
from interface.app import build_runtime, create_app
from tests.clock import FakeClock
from tests.databases import scratch_database
from tests.e2e.support import (
    AddressSource,
    Api,
    Customer,
    buy_body,
    expect,
    expect_problem,
    limits_used,
    local_callback_settings,
    sell_body,
    unique_code,
)
from tests.in_process import bearer_headers

HOOK = "http://localhost:9/contract-flows"  # allow-listed below; nothing listens on the discard port


# --- the app in-process, with a clock the test moves ------------------------------------------------


class Clocked:
    """The app's test client, the ledger's clock, and the headers of each client that calls it."""

    def __init__(self, client: TestClient, clock: FakeClock, ledger: Any, var: Path) -> None:
        self.client, self.clock, self.ledger = client, clock, ledger
        self.broker = bearer_headers(client, var, "demo-broker")
        self.operator = bearer_headers(client, var, "demo-operator")

    def call(self, method: str, path: str, headers: dict[str, str], body: Any = None) -> Any:
        answer = self.client.request(method, path, json=body, headers=headers)
        assert answer.status_code < 300, answer.text
        return answer.json()

    def customer(self, addresses: AddressSource) -> Customer:
        code = unique_code("late")
        self.call("POST", "/customer", self.broker, {"customerCode": code, "trustLevel": "Basic"})
        self.call("PUT", f"/customer/{code}", self.broker, {"status": "ACTIVE"})
        address = addresses()
        account = self.call(
            "POST", f"/customer/{code}/accounts", self.broker, {"customerCryptoAddress": address}
        )
        return Customer(code, account["accountCode"], address, account["dcReceiveAddress"])


@pytest.fixture(scope="module")
def clocked(database_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Clocked]:
    root = tmp_path_factory.mktemp("contract-flows")
    settings = root / "settings.toml"
    settings.write_text(local_callback_settings())
    clock = FakeClock()
    with scratch_database(database_url, "broker_flows") as database, pytest.MonkeyPatch.context() as patch:
        patch.setenv(VAR_ENV, str(root / "var"))
        patch.setenv(SETTINGS_ENV, str(settings))
        runtime = build_runtime(
            database, ledger_clock=clock
        )  # the ledger's time only: tokens keep the real one
        with TestClient(create_app(runtime), raise_server_exceptions=False, timeout=60) as client:
            yield Clocked(client, clock, runtime.ledger, root / "var")


def deliveries(app: Clocked, code: str, count: int) -> list[dict[str, Any]]:
    """The transaction's callback deliveries once the outbox projection has `count` of them (10 s at most)."""
    deadline = time.monotonic() + 10
    while True:
        found = app.call("GET", f"/transactions/custodian/{code}/callbacks", app.broker)["deliveries"]
        if len(found) >= count or time.monotonic() > deadline:
            return found
        time.sleep(0.05)


def hot_wallet_btc(app: Clocked) -> tuple[Decimal, Decimal, Decimal]:
    reserves = app.call("GET", "/reserves", app.broker)
    [hot] = [r for r in reserves["cryptoReserves"] if (r["name"], r["code"]) == ("hot-wallet", "BTC")]
    return Decimal(str(hot["total"])), Decimal(str(hot["locked"])), Decimal(str(hot["available"]))


def sell_used(app: Clocked, code: str) -> Decimal:
    limits = app.call("GET", f"/customer/{code}/limits", app.broker)
    [daily] = [e for e in limits["limits"] if (e["direction"], e["period"]) == ("sell", "daily")]
    return Decimal(str(daily["used"]))


@pytest.mark.parametrize("swept_first", [False, True], ids=["before the sweep", "after the sweep"])
def test_a_payment_first_seen_after_valid_until_is_late_and_never_paid_out(
    clocked: Clocked, addresses: AddressSource, swept_first: bool
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
        assert code in OverdueTransactions(app.ledger).expire_overdue()
    report = {
        "cryptoCode": "BTC",
        "address": sell["destinationCryptoAddress"],
        "txId": f"late-{code}",
        "cryptoAmount": float(amount),
        "confirmations": 6,
    }
    late = app.call("POST", "/chain/deposits", app.operator, report)["transaction"]
    assert (late["status"], late["blockchainTransactionId"]) == ("CANCELLED", f"late-{code}")
    assert not swept_first or code not in OverdueTransactions(app.ledger).expire_overdue()

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
    clocked: Clocked, addresses: AddressSource
) -> None:
    app = clocked
    customer = app.customer(addresses)
    sell = app.call(
        "POST", "/paymentrequest/brokersell", app.broker, sell_body(customer, cryptoAmount=0.001)
    )["transaction"]
    report = {
        "cryptoCode": "BTC",
        "address": sell["destinationCryptoAddress"],
        "txId": f"in-time-{sell['transactionCode']}",
        "cryptoAmount": sell["executedAmounts"]["cryptoAmount"],
        "confirmations": 0,
    }
    app.clock.advance(minutes=30)  # validUntil itself is still in time
    seen = app.call("POST", "/chain/deposits", app.operator, report)["transaction"]
    assert seen["status"] == "Confirming"
    app.clock.advance(minutes=5)
    confirmed = app.call("POST", "/chain/deposits", app.operator, {**report, "confirmations": 6})
    assert confirmed["transaction"]["status"] == "ToPayout"


def test_a_buy_created_without_stage_is_first_called_back_as_sending(
    clocked: Clocked, addresses: AddressSource
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


# --- the package's real server --------------------------------------------------------------------------


def status_history(database_url: str, code: str) -> list[tuple[str | None, str, str]]:
    with psycopg.connect(database_url) as conn:
        return conn.execute(
            "SELECT from_status, to_status, event_type FROM read.transaction_status_history "
            "WHERE transaction_code = %s ORDER BY version",
            (code,),
        ).fetchall()


def test_a_buy_created_without_stage_is_sending_in_every_view_and_its_history_has_both_events(
    broker: Api, customer: Customer, database_url: str
) -> None:
    created = expect(broker.post_json("/brokerbuy", buy_body(customer, 30)), 201)["transaction"]
    code = created["transactionCode"]
    assert (created["status"], created.get("validUntil")) == ("Sending", None)
    assert expect(broker.get(f"/transactions/custodian/{code}"), 200)["transaction"]["status"] == "Sending"

    def listed(status: str) -> set[str]:
        query = {"customerCode": customer.code, "status": status}
        page = expect(broker.get("/transactions/custodian", params=query), 200)
        return {record["transactionCode"] for record in page["records"]}

    assert code in listed("Sending") and code not in listed("Staged")
    history = expect(broker.get(f"/transactions/custodian/{code}/history"), 200)
    assert [event["type"] for event in history["events"]] == ["Staged", "Committed"]
    assert history["events"][0]["data"]["commit_at_once"] is True
    assert status_history(database_url, code) == [(None, "Sending", "Staged")]
    committed = broker.post_json(f"/transactions/custodian/{code}/commit")
    expect_problem(committed, 409, "transaction_not_staged")


def test_a_staged_buy_is_still_staged_then_sending(
    broker: Api, customer: Customer, database_url: str
) -> None:
    created = expect(broker.post_json("/brokerbuy", buy_body(customer, 30, stage=True)), 201)["transaction"]
    assert created["status"] == "Staged"
    code = created["transactionCode"]
    expect(broker.post_json(f"/transactions/custodian/{code}/commit"), 200)
    expect(broker.get(f"/transactions/custodian/{code}"), 200)  # waits for the read models
    assert status_history(database_url, code) == [
        (None, "Staged", "Staged"),
        ("Staged", "Sending", "Committed"),
    ]


SIMULATES = {
    "buy": ("/brokerbuy/simulate", "/brokerbuy"),
    "sell": ("/paymentrequest/brokersell/simulate", "/paymentrequest/brokersell"),
}


def body_for(kind: str, customer: Customer, amount: str) -> dict[str, Any]:
    if kind == "buy":
        return buy_body(customer, amount)
    return sell_body(customer, fiatValue=Decimal(amount))


def event_count(database_url: str) -> int:
    with psycopg.connect(database_url) as conn:
        return conn.execute("SELECT count(*) FROM ledger.ledger_events").fetchone()[0]


def refused_alike(broker: Api, kind: str, body: dict[str, Any], code: str, database_url: str) -> None:
    """The simulate and the create of `body` are refused with the same status and code; the simulate records
    nothing."""
    simulate, create = SIMULATES[kind]
    before = event_count(database_url)
    expect_problem(broker.post_json(simulate, body), 422, code)
    assert event_count(database_url) == before
    expect_problem(broker.post_json(create, body), 422, code)


@pytest.mark.parametrize("kind", ["buy", "sell"])
def test_a_simulate_refuses_a_customer_that_is_not_active_like_its_create(
    broker: Api, addresses: AddressSource, kind: str, database_url: str
) -> None:
    code = unique_code("new")
    expect(broker.post_json("/customer", {"customerCode": code, "trustLevel": "Basic"}), 201)
    account = expect(
        broker.post_json(f"/customer/{code}/accounts", {"customerCryptoAddress": addresses()}), 201
    )
    customer = Customer(code, account["accountCode"], account["customerCryptoAddress"], "")
    refused_alike(broker, kind, body_for(kind, customer, "50"), "customer_not_active", database_url)
    alternative = {"paymentMethodCode": "BANK_EUR_BUY", "accountCode": customer.account_code, "amount": 50}
    expect_problem(broker.post_json("/buy/broker/simulate", alternative), 422, "customer_not_active")
    expect_problem(broker.post_json("/buy/broker", alternative), 422, "customer_not_active")


@pytest.mark.parametrize("kind", ["buy", "sell"])
def test_a_simulate_refuses_what_is_over_the_remaining_limit_like_its_create(
    broker: Api, make_customer: Callable[..., Customer], kind: str, database_url: str
) -> None:
    customer = make_customer()
    limits = expect(broker.get(f"/customer/{customer.code}/limits"), 200)["limits"]
    [daily] = [e for e in limits if (e["direction"], e["period"]) == (kind, "daily")]
    remaining = Decimal(str(daily["remaining"]))
    first = str(remaining - 10)
    expect(broker.post_json(SIMULATES[kind][0], body_for(kind, customer, first)), 200)
    expect(broker.post_json(SIMULATES[kind][1], body_for(kind, customer, first)), 201)
    used = limits_used(broker, customer.code)
    refused_alike(broker, kind, body_for(kind, customer, "20"), "trust_level_limit_exceeded", database_url)
    assert limits_used(broker, customer.code) == used
    expect(
        broker.post_json(SIMULATES[kind][0], body_for(kind, customer, "5")), 200
    )  # what remains still fits
