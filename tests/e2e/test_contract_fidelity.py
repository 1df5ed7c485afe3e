"""What a platform integrating against the original service trips over, over real HTTP: amounts typed as
doubles, every problem of a body listed, paths in any case, and the alternative buy's optional currency."""

from __future__ import annotations

import re
from decimal import Decimal

from tests.e2e.support import Api, Connect, Customer, confirmed_sell, expect, expect_problem


def account_buy_body(customer: Customer, amount: str, **changes: object) -> bytes:
    """A body with the amount written as given (a double's digits, which an encoder would not keep)."""
    fields = {
        "paymentMethodCode": '"BANK_EUR_BUY"',
        "accountCode": f'"{customer.account_code}"',
        "amount": amount,
        **{name: f'"{value}"' for name, value in changes.items()},
    }
    return ("{" + ",".join(f'"{name}":{value}' for name, value in fields.items()) + "}").encode()


def post_raw(api: Api, path: str, body: bytes) -> object:
    return api.post(path, content=body, headers={"content-type": "application/json"})


def test_an_amount_with_a_doubles_noise_is_read_at_fifteen_digits(broker: Api, customer: Customer) -> None:
    created = expect(post_raw(broker, "/buy/broker", account_buy_body(customer, "50.309999999999995")), 201)
    assert created["transaction"]["requestedAmounts"]["fiatValue"] == Decimal("50.31")


def test_an_amount_too_precise_for_its_currency_is_still_refused_by_the_name_the_client_sent(
    broker: Api, customer: Customer
) -> None:
    refused = post_raw(broker, "/buy/broker/simulate", account_buy_body(customer, "50.305"))
    problem = expect_problem(refused, 422, "amount_too_precise")
    assert problem["detail"].startswith("amount 50.305 ")
    assert "fiatValue" not in problem["detail"]


def test_a_crypto_amount_with_a_doubles_noise_is_read_at_fifteen_digits(
    broker: Api, customer: Customer
) -> None:
    body = (
        f'{{"accountCode":"{customer.account_code}","paymentMethodCode":"BANK_EUR_SELL",'
        '"cryptoAmount":0.0010000000000000002}'
    ).encode()
    created = expect(post_raw(broker, "/sell/broker", body), 201)
    assert created["transaction"]["requestedAmounts"]["cryptoAmount"] == Decimal("0.001")


def test_every_missing_field_of_a_body_is_listed(broker: Api) -> None:
    problem = expect_problem(broker.post_json("/brokerbuy/simulate", {}), 422)
    missing = [
        "customerCode",
        "currencyCode",
        "cryptoCode",
        "fiatValue",
        "destinationAddress",
        "paymentMethodCode",
    ]
    assert len(problem["errors"]) == len(missing)
    for field, line in zip(missing, problem["errors"], strict=True):
        assert f"`{field}`" in line


def test_missing_and_invalid_fields_are_listed_together_by_the_names_sent(
    broker: Api, customer: Customer
) -> None:
    body = {"paymentMethodCode": "BANK_EUR_BUY", "amount": "100", "currency": 5, "colour": "red"}
    problem = expect_problem(broker.post_json("/buy/broker/simulate", body), 422)
    text = "\n".join(problem["errors"])
    assert len(problem["errors"]) == 4
    for field in ("accountCode", "amount", "currency", "colour"):
        assert f"`{field}`" in text or f"`$.{field}`" in text


def test_paths_match_whatever_their_case_and_codes_keep_theirs(broker: Api, customer: Customer) -> None:
    expect(broker.get("/Prices/EUR"), 200)
    expect(broker.get(f"/CUSTOMER/{customer.code}"), 200)
    expect_problem(broker.get(f"/customer/{customer.code.upper()}"), 404)
    staged = expect(post_raw(broker, "/Buy/Broker", account_buy_body(customer, "100")), 201)["transaction"]

    executed = broker.post_json(
        "/transaction/execute", {"transactionCode": staged["transactionCode"], "resultCode": "PAYMENTSUCCESS"}
    )

    assert expect(executed, 200)["transaction"]["status"] == "Sending"


def test_the_api_document_keeps_the_specs_spelling(broker: Api) -> None:
    document = broker.get("/schema/openapi.json")
    assert document.status_code == 200
    paths = document.json()["paths"]
    assert "/Transaction/execute" in paths and "/transaction/execute" not in paths


def test_an_account_buy_without_currency_takes_the_payment_methods(broker: Api, customer: Customer) -> None:
    created = expect(post_raw(broker, "/buy/broker", account_buy_body(customer, "100")), 201)
    assert created["transaction"]["currencyCode"] == "EUR"


def test_an_account_buy_whose_currency_is_not_the_payment_methods_is_422(
    broker: Api, customer: Customer
) -> None:
    refused = post_raw(broker, "/buy/broker", account_buy_body(customer, "100", currency="USD"))
    expect_problem(refused, 422, "payment_method_mismatch")


def test_the_payouts_payment_reference_is_stored_on_the_transaction(
    broker: Api, operator: Api, customer: Customer
) -> None:
    code = confirmed_sell(broker, operator, customer, "fidelity")["transactionCode"]

    confirming = operator.put_json(
        f"/transactions/custodian/{code}/payoutconfirming", {"paymentReference": "SEPA-4711"}
    )

    assert expect(confirming, 200)["transaction"]["paymentReference"] == "SEPA-4711"
    read = expect(broker.get(f"/transactions/custodian/{code}"), 200)["transaction"]
    assert read["paymentReference"] == "SEPA-4711"


def _decimals(number_text: str) -> int:
    return len(number_text.partition(".")[2])


def test_every_amount_is_written_at_its_assets_scale(broker: Api, customer: Customer) -> None:
    created = broker.post_json(
        "/brokerbuy",
        {
            "customerCode": customer.code,
            "currencyCode": "EUR",
            "cryptoCode": "BTC",
            "fiatValue": 100,
            "destinationAddress": customer.address,
            "paymentMethodCode": "BANK_EUR_BUY",
        },
    )
    assert created.status_code == 201
    text = created.text
    for field in ("cryptoAmount", "partnerFeeCrypto", "bankFeeCrypto", "networkFeeCrypto"):
        values = re.findall(rf'"{field}":([0-9.]+)', text)
        assert values and all(_decimals(value) == 8 for value in values), (field, values)
    mutation = re.search(r'"balanceMutation":\{"crypto":([0-9.]+),"fiat":([0-9.]+)\}', text)
    assert mutation and _decimals(mutation[1]) == 8 and _decimals(mutation[2]) == 2


def test_a_problems_title_matches_its_code(broker: Api) -> None:
    problem = expect_problem(broker.get("/prices/EUR", headers={"api_version": "9.9"}), 400)
    assert problem["code"] == "api_version_unsupported"
    assert problem["title"] == "API version not served"


def test_a_bad_page_size_is_named_as_the_client_sends_it(broker: Api) -> None:
    problem = expect_problem(broker.get("/transactions/custodian", params={"pageSize": 500}), 400)
    assert problem["errors"][0].startswith("query parameter pageSize:")
    assert "ParamType" not in problem["detail"] and "page_size" not in problem["detail"]


def test_a_token_request_sent_as_json_is_told_to_send_a_form(connect: Connect) -> None:
    with connect(version=None) as anonymous:
        answer = anonymous.post(
            "/connect/token",
            json={"grant_type": "client_credentials", "client_id": "demo-broker", "client_secret": "x"},
        )
    problem = expect_problem(answer, 415, "unsupported_media_type")
    assert "application/x-www-form-urlencoded" in problem["detail"]


def test_amounts_in_messages_are_written_positionally(broker: Api, customer: Customer) -> None:
    body = account_buy_body(customer, "0.000000001")
    problem = expect_problem(post_raw(broker, "/buy/broker/simulate", body), 422)
    assert "E-" not in problem["detail"] and "0.000000001" in problem["detail"]
