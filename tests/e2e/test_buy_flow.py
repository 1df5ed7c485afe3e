"""Buying crypto for a customer, as a broker platform does it: simulate, stage, commit, sendout reports."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from decimal import ROUND_CEILING, ROUND_HALF_UP, Decimal
from typing import Any

import pytest

from application.settings import DEFAULT_SETTINGS, load_settings
from tests.e2e.support import (
    CENT,
    SATOSHI,
    Api,
    Customer,
    buy_body,
    expect,
    expect_problem,
    is_number,
    limits_used,
    open_limit_windows,
)

SETTINGS = load_settings(DEFAULT_SETTINGS)
BTC = SETTINGS.cryptos["BTC"]
AMOUNT_GROUPS = ("requestedAmounts", "executedAmounts", "fees", "balanceMutation")


def check_buy_amounts(tx: dict[str, Any], fiat_value: Decimal, method_code: str) -> None:
    """fiatValue = partner + bank + network fee + the value of the crypto (rounded up to the cent), exactly;
    the crypto is the most the rest buys at the price, to the satoshi."""
    for group in AMOUNT_GROUPS:
        assert all(value is None or is_number(value) for value in tx[group].values()), tx[group]
    method = SETTINGS.payment_methods[method_code]
    executed, fees = tx["executedAmounts"], tx["fees"]
    fiat, crypto, price = executed["fiatValue"], executed["cryptoAmount"], executed["cryptoPrice"]
    assert fiat == fiat_value
    assert tx["requestedAmounts"]["fiatValue"] == fiat_value
    assert tx["requestedAmounts"]["cryptoAmount"] is None
    assert crypto > 0 and crypto == crypto.quantize(SATOSHI)

    crypto_value = (crypto * price).quantize(CENT, rounding=ROUND_CEILING)
    assert fiat == fees["partnerFeeFiat"] + fees["bankFeeFiat"] + fees["networkFeeFiat"] + crypto_value

    nominal_partner = (method.fee_rate * fiat).quantize(CENT, rounding=ROUND_HALF_UP)
    rest = fiat - nominal_partner - method.bank_fee - fees["networkFeeFiat"]
    assert crypto * price <= rest < (crypto + SATOSHI) * price
    assert fees["bankFeeFiat"] == method.bank_fee
    assert fees["networkFeeCrypto"] == BTC.network_fee
    assert fees["networkFeeFiat"] == (BTC.network_fee * price).quantize(CENT, rounding=ROUND_HALF_UP)
    assert fees["partnerFeeCrypto"] == (fees["partnerFeeFiat"] / price).quantize(SATOSHI, ROUND_HALF_UP)
    assert tx["balanceMutation"] == {"crypto": 0, "fiat": 0}


def test_a_staged_buy_goes_from_simulation_to_completed(
    broker: Api, operator: Api, customer: Customer
) -> None:
    body = buy_body(customer, "250.00", paymentReference="order-1", data={"basket": "42"})

    simulated = expect(broker.post_json("/brokerbuy/simulate", body), 200)["transaction"]
    assert simulated["status"] == "SIMULATED" and simulated["type"] == "BROKERBUY"
    assert simulated["transactionCode"]
    check_buy_amounts(simulated, Decimal("250.00"), "BANK_EUR_BUY")

    response = broker.post_json("/brokerbuy", {**body, "stage": True})
    staged = expect(response, 201)["transaction"]
    assert '"fiatValue":250.00' in response.text  # a JSON number, exact to the cent
    assert staged["status"] == "Staged"
    assert staged["customerCode"] == customer.code and staged["accountCode"] == customer.account_code
    assert staged["destinationCryptoAddress"] == customer.address
    assert staged["paymentReference"] == "order-1" and staged["data"] == {"basket": "42"}
    assert staged["validUntil"] is not None
    for group in AMOUNT_GROUPS:
        assert staged[group] == simulated[group]
    code = staged["transactionCode"]

    committed = expect(broker.post(f"/transactions/custodian/{code}/commit"), 200)["transaction"]
    assert committed["status"] == "Sending" and committed["transactionCode"] == code
    check_buy_amounts(committed, Decimal("250.00"), "BANK_EUR_BUY")

    tx_id = uuid.uuid4().hex * 2
    fewer = {"transactionCode": code, "txId": tx_id, "confirmations": BTC.required_confirmations - 1}
    seen = expect(operator.post_json("/chain/sendouts", fewer), 200)["transaction"]
    assert seen["status"] == "Sending"
    assert seen["blockchainTransactionId"] == tx_id
    assert seen["confirmations"] == BTC.required_confirmations - 1
    again = expect(operator.post_json("/chain/sendouts", fewer), 200)["transaction"]
    assert again["status"] == "Sending" and again["updated"] == seen["updated"]  # the same report: no change

    enough = {**fewer, "confirmations": BTC.required_confirmations}
    completed = expect(operator.post_json("/chain/sendouts", enough), 200)["transaction"]
    assert completed["status"] == "COMPLETED"
    check_buy_amounts(completed, Decimal("250.00"), "BANK_EUR_BUY")


@pytest.mark.parametrize(
    ("method", "currency", "fiat_value"),
    [
        ("BANK_EUR_BUY", "EUR", "100"),
        ("BANK_EUR_BUY", "EUR", "123.45"),
        ("BANK_EUR_BUY", "EUR", "999.99"),
        ("CARD_EUR_BUY", "EUR", "3.57"),
        ("CARD_EUR_BUY", "EUR", "777.77"),
        ("BANK_USD_BUY", "USD", "250.10"),
    ],
)
def test_buy_amounts_are_numbers_that_add_up_exactly(
    broker: Api, customer: Customer, method: str, currency: str, fiat_value: str
) -> None:
    body = buy_body(customer, fiat_value, paymentMethodCode=method, currencyCode=currency)

    tx = expect(broker.post_json("/brokerbuy/simulate", body), 200)["transaction"]

    assert tx["currencyCode"] == currency
    assert tx["executedAmounts"]["cryptoPrice"] == SETTINGS.cryptos["BTC"].prices[currency].buy
    check_buy_amounts(tx, Decimal(fiat_value), method)


def test_a_buy_created_without_stage_is_sending_and_cannot_be_committed(
    broker: Api, customer: Customer
) -> None:
    tx = expect(broker.post_json("/brokerbuy", buy_body(customer, 100)), 201)["transaction"]

    assert tx["status"] == "Sending"
    assert tx["validUntil"] is None
    check_buy_amounts(tx, Decimal(100), "BANK_EUR_BUY")
    response = broker.post(f"/transactions/custodian/{tx['transactionCode']}/commit")
    expect_problem(response, 409, "transaction_not_staged")


def test_a_staged_buy_cannot_be_committed_twice(broker: Api, customer: Customer) -> None:
    staged = expect(broker.post_json("/brokerbuy", {**buy_body(customer, 100), "stage": True}), 201)
    code = staged["transaction"]["transactionCode"]

    expect(broker.post(f"/transactions/custodian/{code}/commit"), 200)
    problem = expect_problem(
        broker.post(f"/transactions/custodian/{code}/commit"), 409, "transaction_not_staged"
    )
    assert code in problem["detail"]


def test_committing_an_unknown_transaction_is_404(broker: Api) -> None:
    expect_problem(
        broker.post("/transactions/custodian/TX0000000000000000/commit"), 404, "transaction_not_found"
    )


def test_a_buy_over_the_daily_limit_is_refused(broker: Api, customer: Customer) -> None:
    daily = SETTINGS.trust_levels["Basic"].limit("buy", "daily")

    over = broker.post_json("/brokerbuy", buy_body(customer, daily + CENT))
    problem = expect_problem(over, 422, "trust_level_limit_exceeded")
    assert "daily" in problem["detail"]
    expect(broker.post_json("/brokerbuy", buy_body(customer, daily)), 201)  # exactly the limit fits
    expect_problem(broker.post_json("/brokerbuy", buy_body(customer, 10)), 422, "trust_level_limit_exceeded")


def test_the_daily_limit_counts_foreign_currency_in_the_base_currency(
    broker: Api, customer: Customer
) -> None:
    usd = {"currencyCode": "USD", "paymentMethodCode": "BANK_USD_BUY"}  # 1 USD counts as 0.92 EUR

    refused = broker.post_json("/brokerbuy", buy_body(customer, "1087.00", **usd))  # 1000.04 EUR
    expect_problem(refused, 422, "trust_level_limit_exceeded")
    expect(broker.post_json("/brokerbuy", buy_body(customer, "1086.95", **usd)), 201)  # 999.99 EUR


def test_a_customer_must_be_active_to_buy(broker: Api, addresses: Callable[[], str]) -> None:
    code = f"new-{uuid.uuid4().hex[:12]}"
    expect(broker.post_json("/customer", {"customerCode": code, "trustLevel": "Basic"}), 201)
    address = addresses()
    expect(broker.post_json(f"/customer/{code}/accounts", {"customerCryptoAddress": address}), 201)
    customer = Customer(code, "", address, "")

    expect_problem(broker.post_json("/brokerbuy", buy_body(customer, 100)), 422, "customer_not_active")


@pytest.mark.parametrize("requested", ["56999.99", "66000.01", "1", "120000"])
def test_a_requested_price_outside_the_wiggle_room_is_refused(
    broker: Api, customer: Customer, requested: str
) -> None:
    body = buy_body(customer, 100, requestedPrice=Decimal(requested))

    for path in ("/brokerbuy/simulate", "/brokerbuy"):
        expect_problem(broker.post_json(path, body), 422, "requested_price_outside_wiggle_room")


@pytest.mark.parametrize("requested", ["57000", "66000", "60000.01"])
def test_a_requested_price_inside_the_wiggle_room_is_the_executed_price(
    broker: Api, customer: Customer, requested: str
) -> None:
    body = buy_body(customer, 100, requestedPrice=Decimal(requested))

    tx = expect(broker.post_json("/brokerbuy", body), 201)["transaction"]

    assert tx["executedAmounts"]["cryptoPrice"] == Decimal(requested)
    assert tx["requestedAmounts"]["cryptoPrice"] == Decimal(requested)
    check_buy_amounts(tx, Decimal(100), "BANK_EUR_BUY")


ETH_ADDRESS = "0x52908400098527886E0F7030069857D2E4169EE7"
BAD_BUY_BODIES: dict[str, tuple[dict[str, Any], str]] = {
    "unknown field": ({"fiatValu": 100}, "validation_failed"),
    "stage is not a boolean": ({"stage": "yes"}, "validation_failed"),
    "customerCode is a number": ({"customerCode": 42}, "validation_failed"),
    "fiatValue is an object": ({"fiatValue": {"amount": 100}}, "validation_failed"),
    "fiatValue is a boolean": ({"fiatValue": True}, "validation_failed"),
    "fiatValue is null": ({"fiatValue": None}, "validation_failed"),
    "data value is not a string": ({"data": {"k": 1}}, "validation_failed"),
    "negative fiatValue": ({"fiatValue": Decimal("-5")}, "amount_not_positive"),
    "zero fiatValue": ({"fiatValue": Decimal("0")}, "amount_not_positive"),
    "fiatValue below the fees": ({"fiatValue": Decimal("1")}, "amount_below_fees"),
    "fiatValue past the cent": ({"fiatValue": Decimal("10.001")}, "amount_too_precise"),
    "fiatValue absurdly large": ({"fiatValue": Decimal("1e20")}, "validation_failed"),
    "negative requestedPrice": ({"requestedPrice": Decimal("-1")}, "amount_not_positive"),
    "invalid destination address": ({"destinationAddress": "bc1qnotanaddress"}, "crypto_address_invalid"),
    "destination of another chain": ({"destinationAddress": ETH_ADDRESS}, "crypto_address_invalid"),
    "unknown payment method": ({"paymentMethodCode": "NOPE"}, "payment_method_unknown"),
    "payment method of sells": ({"paymentMethodCode": "BANK_EUR_SELL"}, "payment_method_mismatch"),
    "payment method of another currency": ({"paymentMethodCode": "BANK_USD_BUY"}, "payment_method_mismatch"),
    "unknown currency": ({"currencyCode": "XXX"}, "currency_unknown"),
    "currency in lower case": ({"currencyCode": "eur"}, "validation_failed"),
    "unknown crypto-currency": ({"cryptoCode": "DOGE"}, "crypto_currency_unknown"),
}


@pytest.mark.parametrize("path", ["/brokerbuy/simulate", "/brokerbuy"])
@pytest.mark.parametrize("case", list(BAD_BUY_BODIES))
def test_a_bad_buy_body_is_a_422_problem(broker: Api, customer: Customer, path: str, case: str) -> None:
    changes, code = BAD_BUY_BODIES[case]

    problem = expect_problem(broker.post_json(path, {**buy_body(customer, 100), **changes}), 422, code)

    assert problem["detail"]


@pytest.mark.parametrize("path", ["/brokerbuy/simulate", "/brokerbuy"])
@pytest.mark.parametrize("missing", ["customerCode", "currencyCode", "fiatValue", "destinationAddress"])
def test_a_buy_body_missing_a_required_field_is_a_422_problem(
    broker: Api, customer: Customer, path: str, missing: str
) -> None:
    body = {key: value for key, value in buy_body(customer, 100).items() if key != missing}

    problem = expect_problem(broker.post_json(path, body), 422, "validation_failed")

    assert missing in problem["detail"]


@pytest.mark.parametrize("content", [b"not json", b"{", b'{"fiatValue": NaN}'])
def test_a_body_that_is_not_json_is_a_400_problem(broker: Api, content: bytes) -> None:
    response = broker.post("/brokerbuy", content=content, headers={"content-type": "application/json"})

    expect_problem(response, 400, "malformed_request")


@pytest.mark.parametrize("content", [b"[1, 2]", b"null", b'"text"'])
def test_a_body_that_is_not_an_object_is_a_422_problem(broker: Api, content: bytes) -> None:
    response = broker.post("/brokerbuy", content=content, headers={"content-type": "application/json"})

    expect_problem(response, 422, "validation_failed")


@pytest.mark.parametrize("field", ["fiatValue", "requestedPrice"])
def test_an_amount_sent_as_a_string_is_refused(broker: Api, customer: Customer, field: str) -> None:
    body = {**buy_body(customer, 100), field: "60000" if field == "requestedPrice" else "100"}

    for path in ("/brokerbuy/simulate", "/brokerbuy"):
        problem = expect_problem(broker.post_json(path, body), 422, "validation_failed")
        assert field in problem["detail"]


def test_a_post_without_a_body_is_a_malformed_request(broker: Api) -> None:
    response = broker.post("/brokerbuy", content=b"", headers={"content-type": "application/json"})

    expect_problem(response, 400, "malformed_request")


@pytest.mark.parametrize("history", ["no transaction yet", "a buy but no sell"])
def test_the_limits_of_a_customer_are_readable(broker: Api, customer: Customer, history: str) -> None:
    if history == "a buy but no sell":
        expect(broker.post_json("/brokerbuy", buy_body(customer, 100)), 201)

    limits = expect(broker.get(f"/customer/{customer.code}/limits"), 200)

    used = {(entry["direction"], entry["period"]): entry["used"] for entry in limits["limits"]}
    expected_buy = Decimal(100) if history == "a buy but no sell" else Decimal(0)
    assert used == {
        ("buy", "daily"): expected_buy,
        ("buy", "monthly"): expected_buy,
        ("sell", "daily"): 0,
        ("sell", "monthly"): 0,
    }


def test_the_limits_show_what_a_buy_used(broker: Api, customer: Customer) -> None:
    open_limit_windows(broker, customer)
    before = limits_used(broker, customer.code)

    expect(broker.post_json("/brokerbuy", buy_body(customer, "123.45")), 201)

    after = limits_used(broker, customer.code)
    assert after["buy", "daily"] - before["buy", "daily"] == Decimal("123.45")
    assert after["buy", "monthly"] - before["buy", "monthly"] == Decimal("123.45")
    assert after["sell", "daily"] == before["sell", "daily"]


def test_a_simulation_uses_no_limit(broker: Api, customer: Customer) -> None:
    open_limit_windows(broker, customer)
    before = limits_used(broker, customer.code)

    for _ in range(3):
        expect(broker.post_json("/brokerbuy/simulate", buy_body(customer, 900)), 200)

    assert limits_used(broker, customer.code) == before
