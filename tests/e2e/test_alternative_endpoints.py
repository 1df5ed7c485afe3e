"""The alternative buy and sell endpoints over HTTP: the same flows as the custodian endpoints, by account."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from tests.e2e.support import Api, Connect, Customer, confirmed_sell, expect, expect_problem, limits_used


def account_buy(customer: Customer, amount: Decimal | int = 100, **changes: Any) -> dict[str, Any]:
    body = {
        "paymentMethodCode": "BANK_EUR_BUY",
        "accountCode": customer.account_code,
        "amount": Decimal(amount),
        "currency": "EUR",
    }
    body.update(changes)
    return body


def awaiting_payment(broker: Api, customer: Customer, amount: int = 100) -> dict[str, Any]:
    return expect(broker.post_json("/buy/broker", account_buy(customer, amount, ip="203.0.113.7")), 201)[
        "transaction"
    ]


def execute(broker: Api, code: str, result: str) -> Any:
    return broker.post_json("/Transaction/execute", {"transactionCode": code, "resultCode": result})


@pytest.fixture(scope="module")
def operator_v11(connect: Connect, tokens: dict[str, str]) -> Api:
    with connect(tokens["demo-operator"], version="1.1") as client:
        yield client


def test_an_account_buy_simulation_prices_the_buy_to_the_accounts_withdraw_address(
    broker: Api, customer: Customer
) -> None:
    simulated = expect(broker.post_json("/buy/broker/simulate", account_buy(customer)), 200)["transaction"]
    assert simulated["status"] == "SIMULATED"
    assert simulated["destinationCryptoAddress"] == customer.address
    assert simulated["customerCode"] == customer.code
    fees = simulated["fees"]
    paid = simulated["executedAmounts"]["fiatValue"]
    assert paid == Decimal(100)
    assert paid > fees["partnerFeeFiat"] + fees["bankFeeFiat"] + fees["networkFeeFiat"]


def test_an_account_buy_awaits_payment_and_executes_to_sending(broker: Api, customer: Customer) -> None:
    buy = awaiting_payment(broker, customer)
    assert buy["status"] == "Staged"
    sent = expect(execute(broker, buy["transactionCode"], "PAYMENTSUCCESS"), 200)["transaction"]
    assert sent["status"] == "Sending"


@pytest.mark.parametrize("result", ["PAYMENTFAILED", "PAYMENTCANCELLED"])
def test_a_failed_or_cancelled_payment_cancels_the_buy_and_gives_back_its_limit(
    broker: Api, customer: Customer, result: str
) -> None:
    buy = awaiting_payment(broker, customer, 300)
    assert limits_used(broker, customer.code)[("buy", "daily")] == Decimal(300)
    cancelled = expect(execute(broker, buy["transactionCode"], result), 200)["transaction"]
    assert cancelled["status"] == "CANCELLED"
    assert limits_used(broker, customer.code)[("buy", "daily")] == Decimal(0)


def test_an_unknown_result_code_is_refused_and_changes_nothing(broker: Api, customer: Customer) -> None:
    buy = awaiting_payment(broker, customer)
    expect_problem(execute(broker, buy["transactionCode"], "PAYMENTMAYBE"), 422, "validation_failed")
    assert expect(execute(broker, buy["transactionCode"], "PAYMENTSUCCESS"), 200)["transaction"][
        "status"
    ] == ("Sending")


@pytest.mark.parametrize("result", ["PAYMENTSUCCESS", "PAYMENTFAILED"])
def test_a_buy_that_no_longer_awaits_payment_cannot_be_executed_again(
    broker: Api, customer: Customer, result: str
) -> None:
    buy = awaiting_payment(broker, customer)
    expect(execute(broker, buy["transactionCode"], "PAYMENTSUCCESS"), 200)
    expect_problem(execute(broker, buy["transactionCode"], result), 409)


def test_executing_an_unknown_transaction_is_not_found(broker: Api) -> None:
    expect_problem(execute(broker, "TXDOESNOTEXIST01", "PAYMENTSUCCESS"), 404, "transaction_not_found")


def test_an_account_buy_needs_an_account_of_the_callers_partner(
    broker: Api, other_broker: Api, customer: Customer
) -> None:
    expect_problem(other_broker.post_json("/buy/broker", account_buy(customer)), 404, "account_not_found")


def test_an_account_sell_is_initiated_with_a_deposit_address(broker: Api, customer: Customer) -> None:
    body = {"accountCode": customer.account_code, "paymentMethodCode": "BANK_EUR_SELL", "cryptoAmount": 0.002}
    sell = expect(broker.post_json("/sell/broker", body), 201)["transaction"]
    assert sell["status"] == "Initiated"
    assert sell["type"] == "BROKERSELL"
    assert sell["currencyCode"] == "EUR"
    assert sell["executedAmounts"]["cryptoAmount"] == Decimal("0.002")
    assert sell["destinationCryptoAddress"] not in (customer.address, None)


def test_an_account_sell_with_a_buy_payment_method_is_refused(broker: Api, customer: Customer) -> None:
    body = {"accountCode": customer.account_code, "paymentMethodCode": "BANK_EUR_BUY", "cryptoAmount": 0.002}
    expect_problem(broker.post_json("/sell/broker", body), 422, "payment_method_mismatch")


def test_the_sell_status_update_moves_a_confirmed_sell_through_the_payout(
    broker: Api, operator: Api, operator_v11: Api, customer: Customer
) -> None:
    sell = confirmed_sell(broker, operator, customer, "alt")
    assert sell["status"] == "ToPayout"
    path = f"/transaction/{sell['transactionCode']}"
    confirming = expect(operator_v11.put_json(path, {"statusCode": "PayoutConfirming"}), 200)["transaction"]
    assert confirming["status"] == "PayoutConfirming"
    completed = expect(operator_v11.put_json(path, {"statusCode": "SellCompleted"}), 200)["transaction"]
    assert completed["status"] == "COMPLETED"


def test_sell_completed_is_allowed_straight_from_to_payout(
    broker: Api, operator: Api, operator_v11: Api, customer: Customer
) -> None:
    sell = confirmed_sell(broker, operator, customer, "alt")
    path = f"/transaction/{sell['transactionCode']}"
    assert expect(operator_v11.put_json(path, {"statusCode": "SellCompleted"}), 200)["transaction"][
        "status"
    ] == ("COMPLETED")


def test_payout_confirming_is_refused_for_a_sell_not_yet_paid(
    broker: Api, operator_v11: Api, customer: Customer
) -> None:
    body = {"accountCode": customer.account_code, "paymentMethodCode": "BANK_EUR_SELL", "cryptoAmount": 0.001}
    sell = expect(broker.post_json("/sell/broker", body), 201)["transaction"]
    path = f"/transaction/{sell['transactionCode']}"
    for status in ("PayoutConfirming", "SellCompleted"):
        expect_problem(operator_v11.put_json(path, {"statusCode": status}), 409, "invalid_state_transition")


def test_payout_confirming_is_refused_after_the_sell_completed(
    broker: Api, operator: Api, operator_v11: Api, customer: Customer
) -> None:
    sell = confirmed_sell(broker, operator, customer, "alt")
    path = f"/transaction/{sell['transactionCode']}"
    expect(operator_v11.put_json(path, {"statusCode": "SellCompleted"}), 200)
    expect_problem(
        operator_v11.put_json(path, {"statusCode": "PayoutConfirming"}), 409, "invalid_state_transition"
    )
    expect_problem(
        operator_v11.put_json(path, {"statusCode": "SellCompleted"}), 409, "invalid_state_transition"
    )


def test_the_sell_status_update_answers_only_to_api_version_1_1(
    broker: Api, operator: Api, customer: Customer
) -> None:
    sell = confirmed_sell(broker, operator, customer, "alt")
    problem = expect_problem(
        operator.put_json(f"/transaction/{sell['transactionCode']}", {"statusCode": "SellCompleted"}),
        400,
        "api_version_unsupported",
    )
    assert "1.1" in problem["detail"]


def test_an_unknown_sell_status_is_refused(operator_v11: Api) -> None:
    expect_problem(operator_v11.put_json("/transaction/TXANY0000000001", {"statusCode": "Done"}), 422)


def test_only_operators_update_sell_statuses(connect: Connect, tokens: dict[str, str]) -> None:
    with connect(tokens["demo-broker"], version="1.1") as broker_v11:
        expect_problem(
            broker_v11.put_json("/transaction/TXANY0000000001", {"statusCode": "SellCompleted"}), 403
        )
