"""Reading transactions over HTTP: one by code and pages of them from the read models (right after a write),
the history of one from the event store and its state at a time, per partner and role."""

from __future__ import annotations

from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest

from tests.e2e.support import Api, Customer, buy_body, expect, expect_problem, is_number, sell_body

LIST = "/transactions/custodian"


def create_buy(api: Api, customer: Customer, fiat: str = "20", **extra: Any) -> dict[str, Any]:
    return expect(api.post_json("/brokerbuy", buy_body(customer, fiat, **extra)), 201)["transaction"]


def create_sell(api: Api, customer: Customer, crypto: str = "0.0002") -> dict[str, Any]:
    body = sell_body(customer, cryptoAmount=Decimal(crypto))
    return expect(api.post_json("/paymentrequest/brokersell", body), 201)["transaction"]


def read(api: Api, code: str) -> dict[str, Any]:
    return expect(api.get(f"{LIST}/{code}"), 200)["transaction"]


def listed(api: Api, **params: Any) -> dict[str, Any]:
    return expect(api.get(LIST, params=params), 200)


def test_a_transaction_reads_back_exactly_right_after_each_write(broker: Api, customer: Customer) -> None:
    for _ in range(5):
        staged = create_buy(broker, customer, stage=True, data={"desk": "web"}, paymentReference="p-1")
        assert read(broker, staged["transactionCode"]) == staged
        committed = expect(broker.post(f"{LIST}/{staged['transactionCode']}/commit"), 200)["transaction"]
        assert read(broker, staged["transactionCode"]) == committed
    sell = create_sell(broker, customer)
    assert read(broker, sell["transactionCode"]) == sell
    assert all(is_number(value) for value in sell["fees"].values())


def test_the_list_filters_by_customer_status_type_and_time(broker: Api, customer: Customer) -> None:
    staged = [create_buy(broker, customer, stage=True) for _ in range(2)]
    sending = create_buy(broker, customer)
    sells = [create_sell(broker, customer) for _ in range(2)]

    everything = listed(broker, customerCode=customer.code)
    assert everything["total"] == 5 and everything["totalPages"] == 1
    assert everything["page"] == 1 and everything["pageSize"] == 50
    assert [tx["transactionCode"] for tx in everything["records"]] == [
        tx["transactionCode"] for tx in reversed([*staged, sending, *sells])
    ]
    assert everything["records"][0] == sells[-1]

    by_status = listed(broker, customerCode=customer.code, status="Staged")
    assert {tx["transactionCode"] for tx in by_status["records"]} == {tx["transactionCode"] for tx in staged}
    by_type = listed(broker, customerCode=customer.code, type="BROKERSELL")
    assert {tx["transactionCode"] for tx in by_type["records"]} == {tx["transactionCode"] for tx in sells}

    first = datetime.fromisoformat(staged[0]["created"])
    since_sending = listed(broker, customerCode=customer.code, **{"from": sending["created"]})
    assert since_sending["total"] == 3
    before_sending = listed(broker, customerCode=customer.code, to=sending["created"])
    assert before_sending["total"] == 2
    later = (first + timedelta(days=1)).isoformat()
    assert listed(broker, customerCode=customer.code, **{"from": later})["total"] == 0
    assert listed(broker, customerCode="nobody-has-this-code")["records"] == []
    empty_range = {"from": sending["created"], "to": sending["created"]}
    assert listed(broker, customerCode=customer.code, **empty_range)["total"] == 0


def test_the_list_pages_through_every_transaction_once(broker: Api, customer: Customer) -> None:
    codes = {create_buy(broker, customer, "10")["transactionCode"] for _ in range(5)}
    pages = [listed(broker, customerCode=customer.code, pageSize=2, page=page) for page in (1, 2, 3, 4)]
    assert [page["total"] for page in pages] == [5] * 4
    assert [page["totalPages"] for page in pages] == [3] * 4
    assert [len(page["records"]) for page in pages] == [2, 2, 1, 0]
    seen = [tx["transactionCode"] for page in pages for tx in page["records"]]
    assert len(seen) == len(set(seen)) and set(seen) == codes


def test_the_history_has_every_event_and_as_of_shows_the_transaction_as_it_stood(
    broker: Api, operator: Api, customer: Customer
) -> None:
    staged = create_buy(broker, customer, "30", stage=True)
    code = staged["transactionCode"]
    committed = expect(broker.post(f"{LIST}/{code}/commit"), 200)["transaction"]
    report = {"transactionCode": code, "txId": f"tx-{code}", "confirmations": 6}
    expect(operator.post_json("/chain/sendouts", report), 200)

    history = expect(broker.get(f"{LIST}/{code}/history"), 200)
    assert history["transactionCode"] == code and history["asOf"] is None
    assert [(e["version"], e["type"]) for e in history["events"]] == [
        (1, "Staged"),
        (2, "Committed"),
        (3, "Completed"),
    ]
    assert history["transaction"]["status"] == "COMPLETED"
    order = history["events"][0]["data"]["order"]
    assert order["code"] == code and order["quote"]["fiat_value"] == Decimal("30")
    assert is_number(order["quote"]["crypto_amount"])
    assert history["events"][2]["data"]["payment"]["tx_id"] == f"tx-{code}"

    then = expect(broker.get(f"{LIST}/{code}/history", params={"asOf": staged["created"]}), 200)
    assert then["transaction"] == staged
    assert [e["type"] for e in then["events"]] == ["Staged"]
    after_commit = expect(broker.get(f"{LIST}/{code}/history", params={"asOf": committed["updated"]}), 200)
    assert after_commit["transaction"] == committed

    before = (datetime.fromisoformat(staged["created"]) - timedelta(seconds=1)).isoformat()
    expect_problem(
        broker.get(f"{LIST}/{code}/history", params={"asOf": before}), 404, "transaction_not_found"
    )


def test_as_of_compares_with_the_very_timestamps_the_history_shows(
    broker: Api, operator: Api, customer: Customer
) -> None:
    """One time base: an event's shown timestamp is the transaction's created or updated time, and asOf at
    that timestamp includes the event while a microsecond earlier does not."""
    code = create_buy(broker, customer, "30", stage=True)["transactionCode"]
    expect(broker.post(f"{LIST}/{code}/commit"), 200)
    report = {"transactionCode": code, "txId": f"tx-{code}", "confirmations": 6}
    expect(operator.post_json("/chain/sendouts", report), 200)
    history = expect(broker.get(f"{LIST}/{code}/history"), 200)
    events = history["events"]
    assert events[0]["timestamp"] == history["transaction"]["created"]
    assert events[-1]["timestamp"] == history["transaction"]["updated"]

    for number, event in enumerate(events, start=1):
        shown = datetime.fromisoformat(event["timestamp"])
        at = expect(broker.get(f"{LIST}/{code}/history", params={"asOf": event["timestamp"]}), 200)
        assert [e["version"] for e in at["events"]] == list(range(1, number + 1))
        assert at["transaction"]["updated"] == event["timestamp"]
        earlier = (shown - timedelta(microseconds=1)).isoformat()
        if number == 1:
            expect_problem(
                broker.get(f"{LIST}/{code}/history", params={"asOf": earlier}), 404, "transaction_not_found"
            )
            continue
        before = expect(broker.get(f"{LIST}/{code}/history", params={"asOf": earlier}), 200)
        assert [e["version"] for e in before["events"]] == list(range(1, number))
        assert all(datetime.fromisoformat(e["timestamp"]) <= shown for e in before["events"])


def test_another_partners_transaction_is_not_found(
    broker: Api, other_broker: Api, customer: Customer
) -> None:
    code = create_buy(broker, customer)["transactionCode"]
    expect_problem(other_broker.get(f"{LIST}/{code}"), 404, "transaction_not_found")
    expect_problem(other_broker.get(f"{LIST}/{code}/history"), 404, "transaction_not_found")
    assert listed(other_broker, customerCode=customer.code)["total"] == 0
    expect_problem(broker.get(f"{LIST}/no-such-code"), 404, "transaction_not_found")


def test_an_auditor_and_an_operator_read_transactions_and_histories(
    broker: Api, auditor: Api, operator: Api, customer: Customer
) -> None:
    created = create_buy(broker, customer)
    code = created["transactionCode"]
    for reader in (auditor, operator):
        assert read(reader, code) == created
        assert listed(reader, customerCode=customer.code)["records"] == [created]
        assert expect(reader.get(f"{LIST}/{code}/history"), 200)["transaction"] == created


@pytest.mark.parametrize(
    "params",
    [
        {"status": "Shipped"},
        {"type": "BROKERSWAP"},
        {"from": "yesterday"},
        {"to": "2026-13-45T00:00:00Z"},
        {"page": "0"},
        {"page": "two"},
        {"pageSize": "0"},
        {"pageSize": "201"},
        {"status": "SIMULATED"},
        {"status": "null"},
        {"from": "2026-03-01"},
        {"from": "2026-03-01T00:00:00"},
        {"to": "1700000000"},
    ],
)
def test_bad_filter_values_are_refused_as_problems(broker: Api, params: dict[str, str]) -> None:
    expect_problem(broker.get(LIST, params=params), 400)


def test_a_bad_as_of_is_refused_as_a_problem(broker: Api, customer: Customer) -> None:
    code = create_buy(broker, customer)["transactionCode"]
    for bad in ("not-a-time", "2026-02-30T00:00:00Z", "null"):
        expect_problem(broker.get(f"{LIST}/{code}/history", params={"asOf": bad}), 400, "malformed_request")
