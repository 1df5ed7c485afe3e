"""A body is judged field by field and every problem is listed in one 422, one line per problem, each field
named as the client sent it, the schema's problems beside the content's: a buy or sell (the customer and
limits judged only after the body's content), a new customer, a deposit report, a reserve adjustment.
In-process, on the real app and PostgreSQL."""

from __future__ import annotations

import json
from typing import Any

import pytest
from litestar.testing import TestClient


@pytest.fixture(scope="module")
def headers(broker: dict[str, str]) -> dict[str, str]:
    return broker


def post(
    client: TestClient, headers: dict[str, str], path: str, body: dict[str, Any] | str
) -> dict[str, Any]:
    """The problem a body gets, sent as written when given as text (a double's digits, a number as text)."""
    content = body if isinstance(body, str) else json.dumps(body)
    answer = client.post(path, content=content, headers={**headers, "content-type": "application/json"})
    assert answer.status_code == 422, answer.text
    assert answer.headers["content-type"].startswith("application/problem+json")
    return answer.json()


def buy(customer: dict[str, str], **changes: Any) -> dict[str, Any]:
    body = {
        "customerCode": customer["code"],
        "currencyCode": "EUR",
        "cryptoCode": "BTC",
        "fiatValue": 100,
        "destinationAddress": customer["address"],
        "paymentMethodCode": "BANK_EUR_BUY",
        **changes,
    }
    return {name: value for name, value in body.items() if value is not None}


def lines_about(problem: dict[str, Any], *fields: str) -> None:
    """Each field is named by exactly one line, and there is no other line."""
    errors = problem["errors"]
    assert len(errors) == len(fields), errors
    for field in fields:
        naming = [
            line for line in errors if f"`{field}`" in line or f"`$.{field}`" in line or f"{field} " in line
        ]
        assert len(naming) == 1, (field, errors)
    assert problem["detail"] == "; ".join(errors)


def test_a_missing_field_and_a_negative_amount_are_listed_together(
    client: TestClient, headers: dict[str, str], customer: dict[str, str]
) -> None:
    problem = post(client, headers, "/brokerbuy", buy(customer, customerCode=None, fiatValue=-5))
    lines_about(problem, "customerCode", "fiatValue")
    assert problem["code"] == "validation_failed"
    assert "fiatValue must be greater than zero, got -5" in problem["errors"]


def test_two_problems_of_a_complete_body_are_listed_together_as_validation_failed(
    client: TestClient, headers: dict[str, str], customer: dict[str, str]
) -> None:
    body = '{"fiatValue": 50.305, ' + json.dumps(buy(customer, fiatValue=None, paymentMethodCode="NOPE"))[1:]
    problem = post(client, headers, "/brokerbuy/simulate", body)
    lines_about(problem, "paymentMethodCode", "fiatValue")
    assert problem["code"] == "validation_failed"  # the problems' codes differ
    assert any("amount" not in line and "50.305" in line for line in problem["errors"])


def test_problems_of_one_rule_keep_that_rules_code(
    client: TestClient, headers: dict[str, str], customer: dict[str, str]
) -> None:
    problem = post(client, headers, "/brokerbuy/simulate", buy(customer, fiatValue=-1, requestedPrice=-2))
    lines_about(problem, "fiatValue", "requestedPrice")
    assert problem["code"] == "amount_not_positive"


def test_the_alternative_buy_lists_a_negative_amount_beside_a_currency_too_long(
    client: TestClient, headers: dict[str, str], customer: dict[str, str]
) -> None:
    body = {
        "paymentMethodCode": "BANK_EUR_BUY",
        "accountCode": customer["account"],
        "amount": -1,
        "currency": "USDX",
    }
    problem = post(client, headers, "/buy/broker/simulate", body)
    lines_about(problem, "currency", "amount")
    assert "amount must be greater than zero, got -1" in problem["errors"]


def test_an_amount_sent_as_text_gets_one_line(
    client: TestClient, headers: dict[str, str], customer: dict[str, str]
) -> None:
    problem = post(client, headers, "/brokerbuy/simulate", buy(customer, fiatValue="x"))
    assert problem["errors"] == ["Expected `number`, got `str` - at `$.fiatValue`"]


def test_a_currency_that_is_not_the_payment_methods_is_named_as_the_alternative_buy_sends_it(
    client: TestClient, headers: dict[str, str], customer: dict[str, str]
) -> None:
    body = {
        "paymentMethodCode": "BANK_EUR_BUY",
        "accountCode": customer["account"],
        "amount": 100,
        "currency": "USD",
    }
    problem = post(client, headers, "/buy/broker", body)
    assert problem["code"] == "payment_method_mismatch"
    assert problem["errors"] == ["payment method BANK_EUR_BUY pays in EUR, but currency is USD"]


def test_an_alternative_sell_lists_its_unknown_payment_method_and_its_amount_too_precise(
    client: TestClient, headers: dict[str, str], customer: dict[str, str]
) -> None:
    body = {
        "accountCode": customer["account"],
        "paymentMethodCode": "BANK_EUR_BUY",
        "cryptoAmount": 0.000000001,
    }
    problem = post(client, headers, "/sell/broker", body)
    lines_about(problem, "BANK_EUR_BUY", "cryptoAmount")
    assert problem["code"] == "validation_failed"


def test_a_sell_lists_every_problem_of_its_content(
    client: TestClient, headers: dict[str, str], customer: dict[str, str]
) -> None:
    body = {
        "customerCode": customer["code"],
        "accountCode": customer["account"],
        "currencyCode": "XXX",
        "cryptoCode": "DOGE",
        "paymentMethodCode": "BANK_EUR_BUY",
        "callbackUrl": "http://10.0.0.1/hook",
    }
    problem = post(client, headers, "/paymentrequest/brokersell/simulate", body)
    lines_about(problem, "currencyCode", "cryptoCode", "BANK_EUR_BUY", "callbackUrl", "fiatValue")
    assert problem["code"] == "validation_failed"


def test_the_content_is_judged_before_the_customer(
    client: TestClient, headers: dict[str, str], customer: dict[str, str]
) -> None:
    problem = post(client, headers, "/brokerbuy", buy(customer, customerCode="nobody-at-all", fiatValue=-5))
    assert problem["code"] == "amount_not_positive"


def test_a_body_without_problems_of_content_meets_the_customer_checks(
    client: TestClient, headers: dict[str, str], customer: dict[str, str]
) -> None:
    answer = client.post(
        "/brokerbuy/simulate", json=buy(customer, customerCode="nobody-at-all"), headers=headers
    )
    assert answer.status_code == 404
    assert answer.json()["code"] == "customer_not_found"


def test_a_body_that_is_not_an_object_is_told_so_and_nothing_else(
    client: TestClient, headers: dict[str, str]
) -> None:
    problem = post(client, headers, "/paymentrequest/brokersell/simulate", "[]")
    assert problem["errors"] == ["Expected `object`, got `array`"]


def test_an_unknown_field_and_an_amount_not_above_zero_are_listed_together(
    client: TestClient, headers: dict[str, str], customer: dict[str, str]
) -> None:
    problem = post(client, headers, "/brokerbuy/simulate", buy(customer, fiatValue=0, colour="red"))
    lines_about(problem, "colour", "fiatValue")


def test_a_new_customers_unknown_trust_level_and_unsupported_currency_are_listed_together(
    client: TestClient, headers: dict[str, str]
) -> None:
    body = {"customerCode": "x9", "trustLevel": "Gold", "currencyCode": "XYZ"}
    problem = post(client, headers, "/customer", body)
    lines_about(problem, "trustLevel", "currencyCode")
    assert problem["code"] == "validation_failed"  # trust_level_unknown beside validation_failed
    assert client.get("/customer/x9", headers=headers).status_code == 404


def test_a_new_customers_status_out_of_its_schema_is_listed_beside_its_unknown_trust_level(
    client: TestClient, headers: dict[str, str]
) -> None:
    problem = post(
        client, headers, "/customer", {"customerCode": "x9", "trustLevel": "Gold", "status": "MAYBE"}
    )
    lines_about(problem, "status", "trustLevel")


def test_a_deposit_report_lists_its_confirmations_its_unknown_crypto_and_its_amount_together(
    client: TestClient, operator: dict[str, str], customer: dict[str, str]
) -> None:
    report = {
        "cryptoCode": "DOGE",
        "address": customer["address"],
        "txId": "t-1",
        "cryptoAmount": -1,
        "confirmations": -1,
    }
    problem = post(client, operator, "/chain/deposits", report)
    lines_about(problem, "confirmations", "cryptoCode", "cryptoAmount")


def test_a_deposit_report_of_a_known_crypto_lists_its_amount_beside_its_schema_problem(
    client: TestClient, operator: dict[str, str], customer: dict[str, str]
) -> None:
    report = {"cryptoCode": "BTC", "address": customer["address"], "txId": "t-1", "cryptoAmount": 0.000000001}
    problem = post(client, operator, "/chain/deposits", report)
    lines_about(problem, "confirmations", "cryptoAmount")
    assert any("more than 8 decimal places" in line for line in problem["errors"]), problem["errors"]


def test_an_adjustment_lists_its_kind_out_of_its_schema_beside_its_unknown_asset(
    client: TestClient, operator: dict[str, str]
) -> None:
    body = {
        "kind": "Teleport",
        "code": "XYZ",
        "amount": 1,
        "toReserve": {"name": "cold-1", "type": "ColdStore"},
    }
    problem = post(client, operator, "/reserves/adjustments", body)
    assert len(problem["errors"]) == 2, problem["errors"]
    assert "`$.kind`" in problem["errors"][0]
    assert problem["errors"][1].startswith("'XYZ' is not a currency or crypto-currency of the service")


def test_a_move_lists_its_amount_and_its_missing_source_together(
    client: TestClient, operator: dict[str, str]
) -> None:
    body = {
        "kind": "Move",
        "code": "BTC",
        "amount": -1,
        "toReserve": {"name": "hot-wallet", "type": "HotWallet"},
    }
    problem = post(client, operator, "/reserves/adjustments", body)
    lines_about(problem, "amount", "fromReserve")
    assert problem["code"] == "validation_failed"
