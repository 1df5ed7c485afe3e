"""Bodies nested deeper than anything walks safely, and codes with a trailing newline (issue 25).

960 nested lists (under 2 KB) were a RecursionError, a 500, on every endpoint with a body; here nesting is
bounded where the body is read, 400 before anything walks it. A code's pattern ended in `$`, which matches
before a final newline, so `"customerCode": "hg31485\\n"` made a second customer that looks like the first;
here every code matches to its last character, in a body (422) and in a path (400).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from litestar.testing import TestClient

from tests.amount_fields import DEPOSIT_ADDRESS, account_buy, account_sell, buy, sell
from tests.e2e.support import client_secrets
from tests.in_process import InProcessClient

MISSING_TX = "TX0000000000000000"
NEWLINE = "\n"
BODIES = [
    ("broker", "POST", "/customer"),
    ("broker", "POST", "/brokerbuy"),
    ("operator", "POST", "/reserves/adjustments"),
    ("operator", "POST", "/chain/deposits"),
    ("broker", "POST", "/Transaction/execute"),
    ("operator", "PUT", f"/transactions/custodian/{MISSING_TX}/payout"),
]


@pytest.fixture(scope="module")
def roles(broker: dict[str, str], operator: dict[str, str]) -> dict[str, dict[str, str]]:
    return {
        role: {**given, "content-type": "application/json"}
        for role, given in (("broker", broker), ("operator", operator))
    }


def send(client: TestClient, headers: dict[str, str], method: str, path: str, body: bytes | str) -> Any:
    return client.request(method, path, content=body, headers=headers)


@pytest.mark.parametrize(("role", "method", "path"), BODIES, ids=[f"{m} {p}" for _, m, p in BODIES])
@pytest.mark.parametrize(
    "body",
    ["[" * 960 + "]" * 960, '{"a":' * 490 + "1" + "}" * 490, '[{"a":' * 100 + "1" + "}]" * 100],
    ids=["960 lists", "490 objects", "lists and objects"],
)
def test_a_body_nested_too_deep_is_400_before_anything_walks_it(
    client: TestClient, roles: dict[str, dict[str, str]], role: str, method: str, path: str, body: str
) -> None:
    answer = send(client, roles[role], method, path, body)

    assert answer.status_code == 400, answer.text[:500]
    problem = answer.json()
    assert problem["code"] == "malformed_request"
    assert "at most 32" in problem["detail"]


def test_32_levels_are_read_and_judged_by_the_schema(
    client: TestClient, roles: dict[str, dict[str, str]]
) -> None:
    read = send(client, roles["broker"], "POST", "/customer", "[" * 32 + "]" * 32)
    refused = send(client, roles["broker"], "POST", "/customer", "[" * 33 + "]" * 33)

    assert (read.status_code, read.json()["code"]) == (422, "validation_failed")
    assert (refused.status_code, refused.json()["code"]) == (400, "malformed_request")


def test_brackets_inside_strings_do_not_count_as_nesting(
    client: TestClient, roles: dict[str, dict[str, str]]
) -> None:
    brackets = '[{\\"' * 100
    body = f'{{"customerCode": "x", "trustLevel": "{brackets}"}}'

    answer = send(client, roles["broker"], "POST", "/customer", body)

    assert answer.status_code == 422, answer.text
    assert "trustLevel" in answer.json()["detail"]


# --- codes match to their last character ---------------------------------------------------------------

Body = Callable[[dict[str, str]], dict[str, Any]]
COLD_STORE = {"name": "vault-1", "type": "ColdStore"}
OPENING = {"kind": "OpeningBalance", "code": "BTC", "amount": 1, "toReserve": COLD_STORE}
MOVE = {**OPENING, "kind": "Move", "fromReserve": {"name": "hot-wallet", "type": "HotWallet"}}
SENDOUT = {"transactionCode": MISSING_TX, "txId": "t-1", "confirmations": 1}
DEPOSIT = {
    "cryptoCode": "BTC",
    "address": DEPOSIT_ADDRESS,
    "txId": "t-1",
    "cryptoAmount": 1,
    "confirmations": 1,
}
EXECUTION = {"transactionCode": MISSING_TX, "resultCode": "PAYMENTSUCCESS"}
PAYOUT = f"/transactions/custodian/{MISSING_TX}/payout"


def new_customer(_: dict[str, str]) -> dict[str, Any]:
    code = f"exact-{uuid.uuid4().hex[:8]}"
    return {"customerCode": code, "trustLevel": "Basic", "portfolioCode": "P1", "currencyCode": "EUR"}


def new_account(holder: dict[str, str]) -> dict[str, Any]:
    return {"customerCryptoAddress": holder["address"], "dcCode": "BTC"}


def buy_by_account_code(holder: dict[str, str]) -> dict[str, Any]:
    return {**buy(holder), "accountCode": holder["account"]}


def sell_of_crypto(holder: dict[str, str]) -> dict[str, Any]:
    return {**sell(holder), "cryptoAmount": 0.001}


def account_buy_in_euros(holder: dict[str, str]) -> dict[str, Any]:
    return {**account_buy(holder), "amount": 100, "currency": "EUR"}


def account_sell_of_crypto(holder: dict[str, str]) -> dict[str, Any]:
    return {**account_sell(holder), "cryptoAmount": 0.001}


def fixed(body: dict[str, Any]) -> Body:
    return lambda _: body


# (role, method, path, a valid body, its code fields)
ENDPOINTS: list[tuple[str, str, str, Body, tuple[str, ...]]] = [
    (
        "broker",
        "POST",
        "/customer",
        new_customer,
        ("customerCode", "trustLevel", "portfolioCode", "currencyCode"),
    ),
    ("broker", "POST", "/customer/{code}/accounts", new_account, ("dcCode",)),
    (
        "broker",
        "POST",
        "/brokerbuy",
        buy_by_account_code,
        ("customerCode", "currencyCode", "cryptoCode", "paymentMethodCode", "accountCode"),
    ),
    (
        "broker",
        "POST",
        "/paymentrequest/brokersell",
        sell_of_crypto,
        ("customerCode", "accountCode", "currencyCode", "cryptoCode", "paymentMethodCode"),
    ),
    ("broker", "POST", "/buy/broker", account_buy_in_euros, ("accountCode", "paymentMethodCode", "currency")),
    ("broker", "POST", "/sell/broker", account_sell_of_crypto, ("accountCode", "paymentMethodCode")),
    ("broker", "POST", "/Transaction/execute", fixed(EXECUTION), ("transactionCode",)),
    ("operator", "POST", "/chain/sendouts", fixed(SENDOUT), ("transactionCode", "txId")),
    ("operator", "POST", "/chain/deposits", fixed(DEPOSIT), ("cryptoCode", "txId")),
    ("operator", "PUT", PAYOUT, fixed({"customerBankAccountId": "0" * 32}), ("customerBankAccountId",)),
    (
        "operator",
        "POST",
        "/reserves/adjustments",
        fixed({**OPENING, "adjustmentCode": "adj-1"}),
        ("adjustmentCode", "code", "toReserve.name"),
    ),
    ("operator", "POST", "/reserves/adjustments", fixed(MOVE), ("fromReserve.name",)),
]
CODE_FIELDS = [(r, m, path, body, field) for r, m, path, body, fields in ENDPOINTS for field in fields]


def with_newline(body: dict[str, Any], dotted: str) -> dict[str, Any]:
    """`body` with a newline after the code at `dotted` (`toReserve.name`)."""
    name, _, inner = dotted.partition(".")
    value = body[name]
    return {**body, name: with_newline(value, inner) if inner else value + NEWLINE}


@pytest.mark.parametrize(
    ("role", "method", "path", "body", "field"),
    CODE_FIELDS,
    ids=[f"{path} {field}" for _, _, path, _, field in CODE_FIELDS],
)
def test_a_code_with_a_trailing_newline_is_refused_naming_its_field(
    client: TestClient,
    roles: dict[str, dict[str, str]],
    customer: dict[str, str],
    role: str,
    method: str,
    path: str,
    body: Body,
    field: str,
) -> None:
    sent = json.dumps(with_newline(body(customer), field))

    answer = send(client, roles[role], method, path.format(code=customer["code"]), sent)

    assert answer.status_code == 422, answer.text
    problem = answer.json()
    assert problem["code"] == "validation_failed"
    assert any(line.endswith(f"`$.{field}`") for line in problem["errors"]), problem


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("/customer", {"customerCode": "exact-eu", "trustLevel": "Basic"}, "currencyCode"),
        (
            "/buy/broker/simulate",
            {"accountCode": "AC1", "paymentMethodCode": "BANK_EUR_BUY", "amount": 1},
            "currency",
        ),
    ],
)
def test_a_currency_of_two_letters_and_a_newline_is_refused_by_its_pattern(
    client: TestClient, roles: dict[str, dict[str, str]], path: str, body: dict[str, Any], field: str
) -> None:
    answer = send(client, roles["broker"], "POST", path, json.dumps({**body, field: "EU" + NEWLINE}))

    assert answer.status_code == 422, answer.text
    assert answer.json()["errors"] == [f"Expected `str` matching regex '^[A-Z]{{3}}$' - at `$.{field}`"]


@pytest.mark.parametrize(
    "path",
    ["/customer/{code}%0A", "/customer/{code}%0A/limits", f"/transactions/custodian/{MISSING_TX}%0A"],
)
def test_a_code_in_a_path_with_a_trailing_newline_is_400(
    client: TestClient, roles: dict[str, dict[str, str]], customer: dict[str, str], path: str
) -> None:
    answer = client.get(path.format(code=customer["code"]), headers=roles["broker"])

    assert answer.status_code == 400, answer.text
    assert answer.json()["code"] == "malformed_request"
    assert "path parameter" in answer.json()["detail"]


def test_a_customer_code_with_a_trailing_newline_is_not_a_second_customer(
    client: TestClient, roles: dict[str, dict[str, str]], customer: dict[str, str]
) -> None:
    again = {"customerCode": customer["code"], "trustLevel": "Basic"}
    look_alike = {**again, "customerCode": customer["code"] + NEWLINE}

    refused = send(client, roles["broker"], "POST", "/customer", json.dumps(look_alike))
    existing = send(client, roles["broker"], "POST", "/customer", json.dumps(again))

    assert (refused.status_code, refused.json()["code"]) == (422, "validation_failed")
    assert (existing.status_code, existing.json()["code"]) == (409, "customer_already_exists")


def test_a_client_id_with_a_trailing_newline_is_no_client(client: InProcessClient) -> None:
    secret = client_secrets(client.var)["demo-broker"]
    form = {"grant_type": "client_credentials", "client_id": "demo-broker\n", "client_secret": secret}

    answer = client.post("/connect/token", data=form)

    assert answer.status_code == 401, answer.text
    assert answer.json()["code"] == "invalid_client"


def test_the_api_document_shows_each_pattern_as_ecma_262_writes_it(client: TestClient) -> None:
    document = client.get("/schema/openapi.json").text

    assert r"\\Z" not in document
    assert json.dumps("^[A-Za-z0-9._:@-]+$") in document
