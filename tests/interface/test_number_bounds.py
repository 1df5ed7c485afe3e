"""Numbers bounded before anything computes with them (issue 25): a 190-byte body with `1E+999999999` was
answered after seconds with 2 GB of digits, `1e308` and 100-digit integers were 500s on the account
endpoints, and a requested price took any number of decimals. Here each is refused by its size, naming the
field, in a short answer; a number where none belongs costs nothing; a requested price is no finer than its
currency."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
from litestar.testing import TestClient

from tests.amount_fields import AMOUNT_FIELDS, AmountField, buy

SHORT = 1000  # bytes: more than any refusal of a number needs
BOUNDS = "at most 30 digits before the decimal point and 30 after it"
FIELDS = {field.id: field for field in AMOUNT_FIELDS}
HUGE = [
    ("simulateBrokerBuy.fiatValue", "1E+999999999"),
    ("simulateBrokerBuy.requestedPrice", "1e-999999"),
    ("simulateBrokerBuy.fiatValue", "1e999999999999999999999"),  # an exponent no Decimal can hold
    ("simulateBrokerSell.cryptoAmount", "1E+999999999"),
    ("createReserveAdjustment.amount", "1e-999999999"),
    ("reportDeposit.cryptoAmount", "-1e308"),
    ("simulateAccountBuy.amount", "1e308"),
    ("simulateAccountBuy.amount", "-1e308"),
    ("createAccountBuy.amount", "1e999999"),
    ("createAccountSell.cryptoAmount", "1" + "0" * 99),  # a 100-digit integer
    ("createAccountSell.cryptoAmount", "1" + "0" * 30),  # 31 digits: the least out of the bounds
    ("simulateBrokerBuy.fiatValue", "1" + "0" * 5000),  # more digits than the JSON decoder converts
    ("simulateBrokerBuy.fiatValue", "0." + "0" * 30 + "1"),  # 31 after the point
]


def send(
    client: TestClient, headers: dict[str, dict[str, str]], field: AmountField, body: bytes, **more: str
) -> Any:
    sent = {**headers[field.role], "content-type": "application/json", **more}
    return client.request(field.method, field.path, content=body, headers=sent)


@pytest.fixture(scope="module")
def headers(broker: dict[str, str], operator: dict[str, str]) -> dict[str, dict[str, str]]:
    return {"broker": broker, "operator": operator}


def expect_refused_by_size(answer: Any, name: str) -> dict[str, Any]:
    assert answer.status_code == 422, answer.text[:SHORT]
    assert len(answer.content) < SHORT
    problem = answer.json()
    assert problem["code"] == "validation_failed"
    assert problem["errors"] == [f"Expected a number with {BOUNDS} - at `$.{name}`"]
    return problem


@pytest.mark.parametrize(("field", "number"), HUGE, ids=[f"{f}={n[:20]}" for f, n in HUGE])
def test_a_number_out_of_the_bounds_is_refused_by_its_size_naming_the_field(
    client: TestClient, headers: dict[str, dict[str, str]], customer: dict[str, str], field: str, number: str
) -> None:
    amount = FIELDS[field]
    answer = send(client, headers, amount, amount.request(customer, number))
    expect_refused_by_size(answer, amount.name)


def test_the_largest_number_within_the_bounds_is_judged_by_the_amount_rules_quoted_short(
    client: TestClient, headers: dict[str, dict[str, str]], customer: dict[str, str]
) -> None:
    amount = FIELDS["simulateBrokerBuy.fiatValue"]
    number = "9" * 30 + "." + "9" * 30

    answer = send(client, headers, amount, amount.request(customer, number))

    assert answer.status_code == 422, answer.text
    assert answer.json()["errors"] == ["fiatValue must be below 1000000000000000, got 9.99999999999...E+29"]


def test_thirty_decimals_are_judged_by_the_assets_scale(
    client: TestClient, headers: dict[str, dict[str, str]], customer: dict[str, str]
) -> None:
    amount = FIELDS["simulateBrokerBuy.fiatValue"]
    answer = send(client, headers, amount, amount.request(customer, "100." + "0" * 29 + "1"))

    assert answer.status_code == 422
    assert answer.json()["code"] == "amount_too_precise"
    assert len(answer.content) < SHORT


@pytest.mark.parametrize(
    "body",
    [
        '{"customerCode": "bounds", "trustLevel": "Basic", "extra": 1E+999999999}',
        '{"customerCode": "bounds", "trustLevel": [[1e-999999999, 1' + "0" * 5000 + "]]}",
        '{"customerCode": "bounds", "trustLevel": "Basic", "status": 1e999999999999999999999}',
    ],
    ids=["unknown field", "nested in a list", "where a string belongs"],
)
def test_a_huge_number_where_no_number_belongs_is_refused_without_quoting_it(
    client: TestClient, broker: dict[str, str], body: str
) -> None:
    answer = client.post("/customer", content=body, headers={**broker, "content-type": "application/json"})

    assert answer.status_code == 422, answer.text[:SHORT]
    assert len(answer.content) < SHORT
    assert "0000000000" not in answer.text


def test_a_huge_number_in_an_integer_field_is_refused_by_its_size(
    client: TestClient, operator: dict[str, str]
) -> None:
    body = (
        '{"cryptoCode": "BTC", "address": "bc1qw508d6qejxtdg4y5r3zarvary0c5xw7kv8f3t4", "txId": "t-1",'
        ' "cryptoAmount": 0.001, "confirmations": 1E+999999999}'
    )
    answer = client.post(
        "/chain/deposits", content=body, headers={**operator, "content-type": "application/json"}
    )
    expect_refused_by_size(answer, "confirmations")


def test_a_huge_price_refused_under_an_idempotency_key_is_short_and_leaves_the_key_free(
    client: TestClient, headers: dict[str, dict[str, str]], customer: dict[str, str]
) -> None:
    amount, key = FIELDS["simulateBrokerBuy.requestedPrice"], f"bounds-{uuid.uuid4()}"

    refused = send(client, headers, amount, amount.request(customer, "1e-999999"), **{"Idempotency-Key": key})
    corrected = send(client, headers, amount, amount.request(customer, "60000"), **{"Idempotency-Key": key})

    expect_refused_by_size(refused, "requestedPrice")
    assert corrected.status_code == 200, corrected.text
    assert "idempotent-replayed" not in corrected.headers


def test_a_requested_price_finer_than_its_currency_is_refused_as_too_precise(
    client: TestClient, broker: dict[str, str], customer: dict[str, str]
) -> None:
    body = {**buy(customer), "requestedPrice": 60000.123}

    answer = client.post("/brokerbuy/simulate", content=json.dumps(body), headers=_json(broker))

    assert answer.status_code == 422, answer.text
    assert answer.json()["code"] == "amount_too_precise"
    assert answer.json()["errors"] == [
        "requestedPrice 60000.123 has more than 2 decimal places allowed for EUR"
    ]


def test_a_requested_price_at_its_currencys_scale_is_the_executed_price(
    client: TestClient, broker: dict[str, str], customer: dict[str, str]
) -> None:
    body = {**buy(customer), "requestedPrice": 60000.12}

    answer = client.post("/brokerbuy/simulate", content=json.dumps(body), headers=_json(broker))

    assert answer.status_code == 200, answer.text
    assert answer.json()["transaction"]["executedAmounts"]["cryptoPrice"] == 60000.12


def _json(headers: dict[str, str]) -> dict[str, str]:
    return {**headers, "content-type": "application/json"}
