"""Selling a customer's crypto: a single-use deposit address, the operator's chain reports, the payout flow.

Partner demo has the Payouts feature; partner other has not, so a confirmed sell of partner other completes
at once and the payout endpoints answer it 409 payouts_feature_disabled. Each partner of the demo settings
has an operator of its own to report the payments to its sells.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from decimal import ROUND_CEILING, ROUND_FLOOR, ROUND_HALF_UP, Decimal
from typing import Any

import pytest

from application.adapters.addresses import is_bitcoin_address
from application.settings import DEFAULT_SETTINGS, load_settings
from interface.http.settings import load_service_settings
from tests.e2e.support import (
    CENT,
    SATOSHI,
    Api,
    Customer,
    deposit_report,
    expect,
    expect_problem,
    is_number,
    sell_body,
)

SETTINGS = load_settings(DEFAULT_SETTINGS)
BTC = SETTINGS.cryptos["BTC"]
SELL_METHOD = SETTINGS.payment_methods["BANK_EUR_SELL"]
REQUIRED = BTC.required_confirmations


def check_sell_amounts(tx: dict[str, Any]) -> None:
    """The value of the crypto (rounded down to the cent) = payout + partner + bank + network fee, exactly;
    balanceMutation is the crypto leaving the customer and the payout."""
    for group in ("requestedAmounts", "executedAmounts", "fees", "balanceMutation"):
        assert all(value is None or is_number(value) for value in tx[group].values()), tx[group]
    executed, fees = tx["executedAmounts"], tx["fees"]
    payout, crypto, price = executed["fiatValue"], executed["cryptoAmount"], executed["cryptoPrice"]
    assert crypto > 0 and crypto == crypto.quantize(SATOSHI)
    assert payout > 0 and payout == payout.quantize(CENT)
    crypto_value = (crypto * price).quantize(CENT, rounding=ROUND_FLOOR)
    assert crypto_value == payout + fees["partnerFeeFiat"] + fees["bankFeeFiat"] + fees["networkFeeFiat"]
    assert fees["bankFeeFiat"] == SELL_METHOD.bank_fee
    assert fees["networkFeeCrypto"] == BTC.network_fee
    assert fees["networkFeeFiat"] == (BTC.network_fee * price).quantize(CENT, rounding=ROUND_HALF_UP)
    assert fees["partnerFeeCrypto"] == (fees["partnerFeeFiat"] / price).quantize(SATOSHI, ROUND_HALF_UP)
    assert tx["balanceMutation"] == {"crypto": -crypto, "fiat": payout}


def check_sell_of_crypto(tx: dict[str, Any], crypto_amount: Decimal) -> None:
    """Selling `crypto_amount`: the payout is the largest amount to the cent whose partner fee (at least the
    rate times the payout) still fits in what is left after the fixed fees; the fee is that rate rounded up to
    the cent, plus at most the one cent no larger payout could take."""
    check_sell_amounts(tx)
    executed, fees = tx["executedAmounts"], tx["fees"]
    assert executed["cryptoAmount"] == crypto_amount == tx["requestedAmounts"]["cryptoAmount"]
    assert tx["requestedAmounts"]["fiatValue"] is None
    crypto_value = (crypto_amount * executed["cryptoPrice"]).quantize(CENT, rounding=ROUND_FLOOR)
    before_partner = crypto_value - fees["bankFeeFiat"] - fees["networkFeeFiat"]
    assert executed["fiatValue"] == (before_partner / (1 + SELL_METHOD.fee_rate)).quantize(CENT, ROUND_FLOOR)
    rate_of_payout = (SELL_METHOD.fee_rate * executed["fiatValue"]).quantize(CENT, ROUND_CEILING)
    assert rate_of_payout <= fees["partnerFeeFiat"] <= rate_of_payout + CENT


def check_sell_for_payout(tx: dict[str, Any], payout: Decimal) -> None:
    """Paying out `payout`: the crypto is the least that covers the payout and the nominal fees."""
    check_sell_amounts(tx)
    executed, fees = tx["executedAmounts"], tx["fees"]
    assert executed["fiatValue"] == payout == tx["requestedAmounts"]["fiatValue"]
    assert tx["requestedAmounts"]["cryptoAmount"] is None
    crypto, price = executed["cryptoAmount"], executed["cryptoPrice"]
    nominal_partner = (SELL_METHOD.fee_rate * payout).quantize(CENT, rounding=ROUND_HALF_UP)
    needed = payout + nominal_partner + fees["bankFeeFiat"] + fees["networkFeeFiat"]
    assert (crypto - SATOSHI) * price < needed <= crypto * price


def create_sell(api: Api, customer: Customer, **amount: Any) -> dict[str, Any]:
    tx = expect(api.post_json("/paymentrequest/brokersell", sell_body(customer, **amount)), 201)[
        "transaction"
    ]
    assert tx["status"] == "Initiated"
    return tx


def report(operator: Api, body: dict[str, Any], status: str) -> dict[str, Any]:
    tx = expect(operator.post_json("/chain/deposits", body), 200)["transaction"]
    assert tx["status"] == status
    return tx


def test_a_sell_by_crypto_amount_goes_through_the_payout_flow(
    broker: Api, operator: Api, customer: Customer
) -> None:
    amount = Decimal("0.00250000")

    simulated = expect(
        broker.post_json("/paymentrequest/brokersell/simulate", sell_body(customer, cryptoAmount=amount)), 200
    )["transaction"]
    assert simulated["status"] == "SIMULATED" and simulated["type"] == "BROKERSELL"
    check_sell_of_crypto(simulated, amount)

    tx = create_sell(broker, customer, cryptoAmount=amount, paymentReference="sell-1")
    check_sell_of_crypto(tx, amount)
    for group in ("requestedAmounts", "executedAmounts", "fees", "balanceMutation"):
        assert tx[group] == simulated[group]
    assert tx["executedAmounts"]["cryptoPrice"] == BTC.prices["EUR"].sell
    assert is_bitcoin_address(tx["destinationCryptoAddress"])
    assert tx["destinationCryptoAddress"] not in (customer.address, customer.receive_address)
    assert tx["validUntil"] is not None and tx["paymentReference"] == "sell-1"
    code = tx["transactionCode"]

    confirming = report(operator, deposit_report(tx, REQUIRED - 1), "Confirming")
    assert confirming["confirmations"] == REQUIRED - 1
    assert confirming["blockchainTransactionId"] == f"dep-{code}"
    report(operator, deposit_report(tx, REQUIRED - 1), "Confirming")  # the same report again changes nothing
    expect_problem(
        operator.put_json(f"/transactions/custodian/{code}/payout"), 409, "invalid_state_transition"
    )
    report(operator, deposit_report(tx, REQUIRED), "ToPayout")

    payout = {"customerBankAccountId": str(uuid.uuid4()), "paymentReference": "payout-1"}
    confirming_payout = expect(
        operator.put_json(f"/transactions/custodian/{code}/payoutconfirming", payout), 200
    )
    assert confirming_payout["transaction"]["status"] == "PayoutConfirming"
    again = operator.put_json(f"/transactions/custodian/{code}/payoutconfirming", payout)
    expect_problem(again, 409, "invalid_state_transition")

    completed = expect(operator.put_json(f"/transactions/custodian/{code}/payout", payout), 200)[
        "transaction"
    ]
    assert completed["status"] == "COMPLETED"
    check_sell_of_crypto(completed, amount)
    expect_problem(
        operator.put_json(f"/transactions/custodian/{code}/payout"), 409, "invalid_state_transition"
    )


def test_a_sell_by_fiat_value_is_paid_out_straight_from_to_payout(
    broker: Api, operator: Api, customer: Customer
) -> None:
    tx = create_sell(broker, customer, fiatValue=Decimal("250.00"))
    check_sell_for_payout(tx, Decimal("250.00"))
    code = tx["transactionCode"]

    report(operator, deposit_report(tx, 0), "Confirming")
    report(operator, deposit_report(tx, REQUIRED + 3), "ToPayout")
    completed = expect(operator.put(f"/transactions/custodian/{code}/payout"), 200)["transaction"]

    assert completed["status"] == "COMPLETED"
    check_sell_for_payout(completed, Decimal("250.00"))


@pytest.mark.parametrize("amount", ["0.0002", "0.00123457", "0.01", "0.0100067", "0.015"])
def test_sell_amounts_by_crypto_add_up_exactly(broker: Api, customer: Customer, amount: str) -> None:
    body = sell_body(customer, cryptoAmount=Decimal(amount))

    tx = expect(broker.post_json("/paymentrequest/brokersell/simulate", body), 200)["transaction"]

    check_sell_of_crypto(tx, Decimal(amount))


@pytest.mark.parametrize("payout", ["5", "49.99", "100", "333.33", "999.99"])
def test_sell_amounts_by_fiat_value_add_up_exactly(broker: Api, customer: Customer, payout: str) -> None:
    body = sell_body(customer, fiatValue=Decimal(payout))

    tx = expect(broker.post_json("/paymentrequest/brokersell/simulate", body), 200)["transaction"]

    check_sell_for_payout(tx, Decimal(payout))


def test_every_sell_gets_its_own_deposit_address(broker: Api, customer: Customer) -> None:
    addresses = {
        create_sell(broker, customer, fiatValue=Decimal(20))["destinationCryptoAddress"] for _ in range(3)
    }

    assert len(addresses) == 3
    assert customer.receive_address not in addresses


@pytest.mark.parametrize("path", ["/paymentrequest/brokersell/simulate", "/paymentrequest/brokersell"])
@pytest.mark.parametrize(
    "amounts",
    [{}, {"fiatValue": Decimal(100), "cryptoAmount": Decimal("0.002")}],
    ids=["neither", "both"],
)
def test_a_sell_needs_exactly_one_of_fiat_value_and_crypto_amount(
    broker: Api, customer: Customer, path: str, amounts: dict[str, Decimal]
) -> None:
    response = broker.post_json(path, sell_body(customer, **amounts))

    expect_problem(response, 422, "fiat_value_or_crypto_amount_required")


BAD_SELL_BODIES: dict[str, tuple[dict[str, Any], int, str]] = {
    "negative cryptoAmount": ({"cryptoAmount": Decimal("-0.001")}, 422, "amount_not_positive"),
    "zero fiatValue": ({"fiatValue": Decimal(0)}, 422, "amount_not_positive"),
    "cryptoAmount past the satoshi": ({"cryptoAmount": Decimal("0.000000001")}, 422, "amount_too_precise"),
    "cryptoAmount below the fees": ({"cryptoAmount": Decimal("0.00001")}, 422, "amount_below_fees"),
    "cryptoAmount as a string": ({"cryptoAmount": "0.001"}, 422, "validation_failed"),
    "unknown field": ({"cryptoAmount": Decimal("0.001"), "amount": 1}, 422, "validation_failed"),
    "payment method of buys": (
        {"cryptoAmount": Decimal("0.001"), "paymentMethodCode": "BANK_EUR_BUY"},
        422,
        "payment_method_mismatch",
    ),
    "requestedPrice above the wiggle room": (
        {"cryptoAmount": Decimal("0.001"), "requestedPrice": Decimal("61950.01")},
        422,
        "requested_price_outside_wiggle_room",
    ),
    "requestedPrice below the wiggle room": (
        {"cryptoAmount": Decimal("0.001"), "requestedPrice": Decimal("53099.99")},
        422,
        "requested_price_outside_wiggle_room",
    ),
    "unknown account": (
        {"cryptoAmount": Decimal("0.001"), "accountCode": "AC0000"},
        404,
        "account_not_found",
    ),
}


@pytest.mark.parametrize("case", list(BAD_SELL_BODIES))
def test_a_bad_sell_body_is_a_problem(broker: Api, customer: Customer, case: str) -> None:
    changes, status, code = BAD_SELL_BODIES[case]

    for path in ("/paymentrequest/brokersell/simulate", "/paymentrequest/brokersell"):
        expect_problem(broker.post_json(path, sell_body(customer, **changes)), status, code)


def test_a_sell_from_another_customers_account_is_refused(
    broker: Api, make_customer: Callable[..., Customer]
) -> None:
    owner, other = make_customer(), make_customer()
    body = {**sell_body(other, cryptoAmount=Decimal("0.001")), "accountCode": owner.account_code}

    expect_problem(broker.post_json("/paymentrequest/brokersell", body), 422, "account_not_of_customer")


@pytest.mark.parametrize("requested", ["53100", "61950"])
def test_a_requested_sell_price_at_the_edge_of_the_wiggle_room_is_the_executed_price(
    broker: Api, customer: Customer, requested: str
) -> None:
    body = sell_body(customer, cryptoAmount=Decimal("0.001"), requestedPrice=Decimal(requested))

    tx = expect(broker.post_json("/paymentrequest/brokersell", body), 201)["transaction"]

    assert tx["executedAmounts"]["cryptoPrice"] == Decimal(requested)
    check_sell_of_crypto(tx, Decimal("0.001"))


def test_a_deposit_of_another_amount_blocks_the_sell(broker: Api, operator: Api, customer: Customer) -> None:
    tx = create_sell(broker, customer, cryptoAmount=Decimal("0.001"))
    code = tx["transactionCode"]

    blocked = report(operator, deposit_report(tx, REQUIRED, Decimal("0.0011")), "BLOCKED")

    assert blocked["confirmations"] == REQUIRED
    report(operator, deposit_report(tx, REQUIRED + 1, Decimal("0.0011")), "BLOCKED")  # blocked stays blocked
    conflict = operator.post_json("/chain/deposits", deposit_report(tx, REQUIRED))  # same txId, other amount
    expect_problem(conflict, 409, "chain_report_conflict")
    for action in ("payoutconfirming", "payout"):
        response = operator.put(f"/transactions/custodian/{code}/{action}")
        expect_problem(response, 409, "invalid_state_transition")


def test_payout_endpoints_refuse_an_initiated_sell(broker: Api, operator: Api, customer: Customer) -> None:
    code = create_sell(broker, customer, cryptoAmount=Decimal("0.001"))["transactionCode"]

    for action in ("payoutconfirming", "payout"):
        problem = expect_problem(
            operator.put(f"/transactions/custodian/{code}/{action}"), 409, "invalid_state_transition"
        )
        assert "Initiated" in problem["detail"]


def test_payout_endpoints_refuse_a_buy(broker: Api, operator: Api, customer: Customer) -> None:
    body = {
        "customerCode": customer.code,
        "currencyCode": "EUR",
        "cryptoCode": "BTC",
        "fiatValue": 100,
        "destinationAddress": customer.address,
        "paymentMethodCode": "BANK_EUR_BUY",
    }
    code = expect(broker.post_json("/brokerbuy", body), 201)["transaction"]["transactionCode"]

    expect_problem(operator.put(f"/transactions/custodian/{code}/payout"), 409, "invalid_state_transition")


def test_a_second_transfer_for_the_same_sell_is_a_conflict(
    broker: Api, operator: Api, customer: Customer
) -> None:
    tx = create_sell(broker, customer, cryptoAmount=Decimal("0.001"))
    report(operator, deposit_report(tx, 1, tx_id="first"), "Confirming")

    expect_problem(
        operator.post_json("/chain/deposits", deposit_report(tx, 1, tx_id="second")),
        409,
        "chain_report_conflict",
    )


def test_a_deposit_to_an_unknown_address_is_404(operator: Api, customer: Customer) -> None:
    body = {
        "cryptoCode": "BTC",
        "address": customer.address,
        "txId": "x1",
        "cryptoAmount": 1,
        "confirmations": 1,
    }

    expect_problem(operator.post_json("/chain/deposits", body), 404, "deposit_address_unknown")
    account_address = {**body, "address": customer.receive_address}  # an account's, not a sell's
    expect_problem(operator.post_json("/chain/deposits", account_address), 404, "deposit_address_unknown")


@pytest.mark.parametrize("amount", ["0", "-0.001"])
def test_a_deposit_report_of_a_non_positive_amount_is_refused(
    broker: Api, operator: Api, customer: Customer, amount: str
) -> None:
    tx = create_sell(broker, customer, cryptoAmount=Decimal("0.001"))

    expect_problem(operator.post_json("/chain/deposits", deposit_report(tx, REQUIRED, Decimal(amount))), 422)
    report(operator, deposit_report(tx, REQUIRED, tx_id="the-real-payment"), "ToPayout")


def test_partner_other_sells_but_the_demo_operator_cannot_touch_them(
    other_broker: Api, operator: Api, make_customer: Callable[..., Customer]
) -> None:
    """The demo operator cannot report partner other's payments nor pay its sells out: to it they do not
    exist."""
    seller = make_customer(other_broker)
    tx = create_sell(other_broker, seller, cryptoAmount=Decimal("0.001"))
    code = tx["transactionCode"]

    expect_problem(
        operator.post_json("/chain/deposits", deposit_report(tx, REQUIRED)), 404, "deposit_address_unknown"
    )
    for action in ("payoutconfirming", "payout"):
        response = operator.put(f"/transactions/custodian/{code}/{action}")
        expect_problem(response, 404, "transaction_not_found")


def test_every_partner_of_the_demo_settings_has_a_broker_and_an_operator() -> None:
    """Without an operator of its own nobody could report the payments to a partner's sells."""
    clients = load_service_settings(DEFAULT_SETTINGS).clients().values()
    for code in SETTINGS.partners:
        roles = {role for client in clients if client.partner == code for role in client.roles}
        assert {"broker", "operator"} <= roles, code


def test_without_payouts_a_confirmed_sell_completes_and_payouts_are_refused(
    other_broker: Api, other_operator: Api, make_customer: Callable[..., Customer]
) -> None:
    seller = make_customer(other_broker)
    tx = create_sell(other_broker, seller, cryptoAmount=Decimal("0.001"))
    code = tx["transactionCode"]

    report(other_operator, deposit_report(tx, REQUIRED - 1), "Confirming")
    completed = report(
        other_operator, deposit_report(tx, REQUIRED), "COMPLETED"
    )  # no ToPayout without the feature

    check_sell_of_crypto(completed, Decimal("0.001"))
    assert expect(other_broker.get(f"/transactions/custodian/{code}"), 200)["transaction"] == completed
    for action in ("payoutconfirming", "payout"):
        response = other_operator.put(f"/transactions/custodian/{code}/{action}")
        expect_problem(response, 409, "payouts_feature_disabled")


def test_without_payouts_the_payout_endpoints_refuse_any_sell(
    other_broker: Api, other_operator: Api, make_customer: Callable[..., Customer]
) -> None:
    seller = make_customer(other_broker)
    code = create_sell(other_broker, seller, fiatValue=Decimal(50))["transactionCode"]

    for action in ("payoutconfirming", "payout"):
        response = other_operator.put(f"/transactions/custodian/{code}/{action}")
        expect_problem(response, 409, "payouts_feature_disabled")
