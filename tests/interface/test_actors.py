"""Who did what (issue 40): every event records its actor, stored with it (so the audit chain and the Merkle
tree, which hash the stored bytes, cover it) and shown by the history: for a request, the client, its roles
and the request's id, the same `X-Request-Id` its answer carried. In-process, on the real app and
PostgreSQL; the expiry sweeper's actor is in `test_resolutions.py`, whose app has a clock to move."""

from __future__ import annotations

from typing import Any

from litestar.testing import TestClient


def history(client: TestClient, broker: dict[str, str], code: str) -> list[dict[str, Any]]:
    answer = client.get(f"/transactions/custodian/{code}/history", headers=broker)
    assert answer.status_code == 200, answer.text
    return answer.json()["events"]


def test_a_buys_events_name_the_client_its_roles_and_the_request_that_made_them(
    client: TestClient, broker: dict[str, str], customer: dict[str, str]
) -> None:
    body = {
        "customerCode": customer["code"],
        "currencyCode": "EUR",
        "cryptoCode": "BTC",
        "fiatValue": 100,
        "destinationAddress": customer["address"],
        "paymentMethodCode": "BANK_EUR_BUY",
    }
    answer = client.post("/brokerbuy", json=body, headers={**broker, "X-Request-Id": "buy-by-alice-7"})
    assert answer.status_code == 201, answer.text
    assert answer.headers["x-request-id"] == "buy-by-alice-7"

    events = history(client, broker, answer.json()["transaction"]["transactionCode"])

    expected = {"kind": "http", "client": "demo-broker", "roles": "broker", "request": "buy-by-alice-7"}
    assert [(event["type"], event["actor"]) for event in events] == [
        ("Staged", expected),
        ("Committed", expected),
    ]
    assert all("_by_" not in event["data"] for event in events)


def test_each_step_of_a_sell_names_its_own_client_and_request(
    client: TestClient, broker: dict[str, str], operator: dict[str, str], customer: dict[str, str]
) -> None:
    body = {
        "customerCode": customer["code"],
        "accountCode": customer["account"],
        "currencyCode": "EUR",
        "cryptoCode": "BTC",
        "paymentMethodCode": "BANK_EUR_SELL",
        "cryptoAmount": 0.002,
    }
    created = client.post("/paymentrequest/brokersell", json=body, headers=broker)
    assert created.status_code == 201, created.text
    sell = created.json()["transaction"]
    deposit = {
        "cryptoCode": "BTC",
        "address": sell["destinationCryptoAddress"],
        "txId": f"actor-{sell['transactionCode']}",
        "cryptoAmount": 0.002,
        "confirmations": 6,
    }
    reported = client.post("/chain/deposits", json=deposit, headers=operator)  # no id sent: one is made
    assert reported.status_code == 200, reported.text

    initiated, paid = history(client, broker, sell["transactionCode"])

    assert initiated["actor"] == {
        "kind": "http",
        "client": "demo-broker",
        "roles": "broker",
        "request": created.headers["x-request-id"],
    }
    assert paid["actor"] == {
        "kind": "http",
        "client": "demo-operator",
        "roles": "operator",
        "request": reported.headers["x-request-id"],
    }
    assert created.headers["x-request-id"] != reported.headers["x-request-id"]
