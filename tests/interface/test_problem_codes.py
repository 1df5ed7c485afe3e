"""Each operation's refusals are listed in the API document with their `code`: known refusals of every kind
are driven in-process against the real app, and each answer's status and code must be among those the
document lists for that operation (`x-codes` of the response, also written in its description)."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from litestar.testing import TestClient

from interface.http.shapes import EXAMPLE_ADDRESS
from tests.in_process import InProcessClient

MISSING_TX = "TX0000000000000000"
BUY = {
    "currencyCode": "EUR",
    "cryptoCode": "BTC",
    "fiatValue": 100,
    "destinationAddress": EXAMPLE_ADDRESS,
    "paymentMethodCode": "BANK_EUR_BUY",
}
SELL = {"currencyCode": "EUR", "cryptoCode": "BTC", "paymentMethodCode": "BANK_EUR_SELL", "fiatValue": 100}


@pytest.fixture(scope="module")
def document(client: TestClient) -> dict[str, Any]:
    return client.get("/schema/openapi.json").json()


@pytest.fixture(scope="module")
def headers(client: InProcessClient) -> dict[str, dict[str, str]]:
    return {role: client.headers_of(f"demo-{role}") for role in ("broker", "operator")}


@pytest.fixture(scope="module")
def customers(client: TestClient, headers: dict[str, dict[str, str]]) -> dict[str, str]:
    """A NEW customer, and an ACTIVE one with an account: their codes and the account's."""
    broker = headers["broker"]
    new, active = (f"codes-{uuid.uuid4().hex[:10]}" for _ in range(2))
    for code, status in ((new, "NEW"), (active, "ACTIVE")):
        body = {"customerCode": code, "trustLevel": "Basic", "status": status}
        assert client.post("/customer", json=body, headers=broker).status_code == 201
    opened = client.post(
        f"/customer/{active}/accounts", json={"customerCryptoAddress": EXAMPLE_ADDRESS}, headers=broker
    )
    assert opened.status_code == 201, opened.text
    return {"new": new, "active": active, "account": opened.json()["accountCode"]}


def refusals(c: dict[str, str]) -> list[tuple[str, str, str, Any, int, str]]:
    """(role, method, path, JSON body, status, code) of refusals every operation is known to give."""
    new, active, account = c["new"], c["active"], c["account"]
    return [
        ("broker", "GET", "/customer/nobody-here", None, 404, "customer_not_found"),
        ("broker", "GET", "/customer/nobody-here/limits", None, 404, "customer_not_found"),
        ("broker", "PUT", "/customer/nobody-here", {"status": "ACTIVE"}, 404, "customer_not_found"),
        (
            "broker",
            "POST",
            "/customer",
            {"customerCode": new, "trustLevel": "Basic"},
            409,
            "customer_already_exists",
        ),
        (
            "broker",
            "POST",
            "/customer",
            {"customerCode": "x", "trustLevel": "Gold"},
            422,
            "trust_level_unknown",
        ),
        (
            "broker",
            "POST",
            f"/customer/{active}/accounts",
            {"customerCryptoAddress": "nope"},
            422,
            "crypto_address_invalid",
        ),
        ("broker", "GET", "/prices/XXX", None, 404, "currency_not_found"),
        ("broker", "POST", "/brokerbuy", {**BUY, "customerCode": "nobody-here"}, 404, "customer_not_found"),
        ("broker", "POST", "/brokerbuy/simulate", {**BUY, "customerCode": new}, 422, "customer_not_active"),
        (
            "broker",
            "POST",
            "/brokerbuy/simulate",
            {**BUY, "customerCode": active, "fiatValue": 5000},
            422,
            "trust_level_limit_exceeded",
        ),
        (
            "broker",
            "POST",
            "/paymentrequest/brokersell",
            {**SELL, "customerCode": active, "accountCode": "AC0"},
            404,
            "account_not_found",
        ),
        (
            "broker",
            "POST",
            "/paymentrequest/brokersell/simulate",
            {**SELL, "customerCode": active, "accountCode": account, "fiatValue": 0},
            422,
            "amount_not_positive",
        ),
        (
            "broker",
            "POST",
            "/transactions/custodian/" + MISSING_TX + "/commit",
            None,
            404,
            "transaction_not_found",
        ),
        ("broker", "GET", "/transactions/custodian/" + MISSING_TX, None, 404, "transaction_not_found"),
        (
            "broker",
            "GET",
            "/transactions/custodian/" + MISSING_TX + "/history",
            None,
            404,
            "transaction_not_found",
        ),
        (
            "broker",
            "GET",
            "/transactions/custodian/" + MISSING_TX + "/callbacks",
            None,
            404,
            "transaction_not_found",
        ),
        (
            "operator",
            "PUT",
            "/transactions/custodian/" + MISSING_TX + "/payout",
            {},
            404,
            "transaction_not_found",
        ),
        (
            "operator",
            "PUT",
            "/transactions/custodian/" + MISSING_TX + "/payoutconfirming",
            {},
            404,
            "transaction_not_found",
        ),
        (
            "operator",
            "POST",
            "/chain/sendouts",
            {"transactionCode": MISSING_TX, "txId": "t", "confirmations": 1},
            404,
            "transaction_not_found",
        ),
        (
            "operator",
            "POST",
            "/chain/deposits",
            {
                "cryptoCode": "BTC",
                "address": EXAMPLE_ADDRESS,
                "txId": "t",
                "cryptoAmount": 1,
                "confirmations": 1,
            },
            404,
            "deposit_address_unknown",
        ),
        (
            "operator",
            "POST",
            "/reserves/adjustments",
            {
                "kind": "Move",
                "code": "BTC",
                "amount": 1,
                "toReserve": {"name": "hot-wallet", "type": "HotWallet"},
            },
            422,
            "reserve_adjustment_shape_invalid",
        ),
        (
            "broker",
            "POST",
            "/buy/broker/simulate",
            {"accountCode": "AC0", "paymentMethodCode": "BANK_EUR_BUY", "amount": 50},
            404,
            "account_not_found",
        ),
        (
            "broker",
            "POST",
            "/buy/broker",
            {"accountCode": account, "paymentMethodCode": "BANK_EUR_BUY", "amount": 50.001},
            422,
            "amount_too_precise",
        ),
        (
            "broker",
            "POST",
            "/Transaction/execute",
            {"transactionCode": MISSING_TX, "resultCode": "PAYMENTSUCCESS"},
            404,
            "transaction_not_found",
        ),
        (
            "broker",
            "POST",
            "/sell/broker",
            {"accountCode": account, "paymentMethodCode": "BANK_EUR_BUY", "cryptoAmount": 0.001},
            422,
            "payment_method_mismatch",
        ),
        ("broker", "GET", "/reserves", None, 400, "api_version_missing"),
        ("operator", "GET", "/customer/" + active, None, 403, "forbidden"),
        ("", "GET", "/transactions/custodian", None, 401, "unauthorized"),
    ]


def operation_of(document: dict[str, Any], method: str, path: str) -> dict[str, Any]:
    """The document's operation that a request to `path` reaches (a literal path before a template)."""
    parts = path.split("/")
    candidates = [
        (template.count("{"), operations[method.lower()])
        for template, operations in document["paths"].items()
        if method.lower() in operations
        and len(template.split("/")) == len(parts)
        and all(t == p or t.startswith("{") for t, p in zip(template.split("/"), parts, strict=True))
    ]
    return min(candidates, key=lambda found: found[0])[1]


def test_every_known_refusal_is_listed_with_its_code_under_its_operation(
    client: TestClient,
    document: dict[str, Any],
    headers: dict[str, dict[str, str]],
    customers: dict[str, str],
) -> None:
    unlisted = []
    for role, method, path, body, status, code in refusals(customers):
        sent = dict(headers.get(role, {"api_version": "1.2"}))
        if path == "/reserves":
            sent.pop("api_version")
        answer = client.request(method, path, json=body, headers=sent)
        assert (answer.status_code, answer.json().get("code")) == (status, code), (path, answer.text)
        operation = operation_of(document, method, path)
        listed = operation["responses"].get(str(status), {})
        if code not in listed.get("x-codes", []) or f"`{code}`" not in listed.get("description", ""):
            unlisted.append(f"{operation['operationId']} {status} {code}")
    assert unlisted == []


def test_an_operation_lists_no_code_of_another_resource(document: dict[str, Any]) -> None:
    customer = document["paths"]["/customer/{customer_code}"]["get"]["responses"]
    assert customer["404"]["x-codes"] == ["customer_not_found"]
    assert "transaction_not_found" not in customer["404"]["description"]


def test_the_health_check_keeps_its_own_description_of_a_stall(document: dict[str, Any]) -> None:
    unavailable = document["paths"]["/health"]["get"]["responses"]["503"]
    assert unavailable["description"].startswith("A projection stalled (`projection_stalled`)")
    codes = ["committer_stalled", "database_read_only", "database_unavailable", "projection_stalled"]
    assert sorted(unavailable["x-codes"]) == codes
    assert "503" not in document["paths"]["/health/live"]["get"]["responses"]
