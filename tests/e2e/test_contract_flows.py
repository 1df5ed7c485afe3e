"""Contract flows a platform relies on, over HTTP (issue 13), on the package's app:

- a buy created without `stage` is Sending in every outward view from the start, and its history still lists
  both of its events, Staged and Committed;
- a simulate refuses exactly what the create with the same body would refuse, and records nothing.

The flows that need time to pass (a late payment, the first callback of an unstaged buy) run on an app with a
settable clock: `tests/interface/test_clocked_contract_flows.py`.
"""

from __future__ import annotations

from collections.abc import Callable
from decimal import Decimal
from typing import Any

import psycopg
import pytest

from tests.e2e.support import (
    AddressSource,
    Api,
    Customer,
    buy_body,
    expect,
    expect_problem,
    limits_used,
    sell_body,
    unique_code,
)


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
