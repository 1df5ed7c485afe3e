"""Reserves over HTTP: the operator records opening balances and moves, buys and sells move the hot wallet
and the bank, and `GET /reserves` shows totals, locked and unconfirmed amounts as they follow.

The server and its database are shared by every end-to-end test, so the built-in reserves are compared
before and after each step (differences), and new reserves get unique names.
"""

from __future__ import annotations

import uuid
from decimal import Decimal
from typing import Any

import pytest

from application.settings import load_settings
from tests.e2e.support import (
    Api,
    Customer,
    buy_body,
    expect,
    expect_problem,
    is_number,
    sell_body,
)

SETTINGS = load_settings()
REQUIRED = SETTINGS.cryptos["BTC"].required_confirmations
NETWORK_FEE = SETTINGS.cryptos["BTC"].network_fee
ITEM = {"name", "type", "code", "total", "locked", "available", "unconfirmed", "updated"}


def reserves(api: Api) -> dict[tuple[str, str], dict[str, Any]]:
    """GET /reserves, as (name, code) -> item; checks the shape and that available = total - locked."""
    body = expect(api.get("/reserves"), 200)
    assert set(body) == {"cryptoReserves", "currencyReserves"}
    found = {}
    for group, cryptos in (("cryptoReserves", True), ("currencyReserves", False)):
        for item in body[group]:
            assert set(item) == ITEM
            assert (item["code"] in SETTINGS.cryptos) == cryptos
            assert item["type"] in ("Exchange", "HotWallet", "ColdStore")
            assert all(is_number(item[k]) for k in ("total", "locked", "available", "unconfirmed"))
            assert item["available"] == item["total"] - item["locked"]
            found[item["name"], item["code"]] = item
    return found


def amounts(item: dict[str, Any]) -> tuple[Decimal, Decimal, Decimal]:
    return Decimal(item["total"]), Decimal(item["locked"]), Decimal(item["unconfirmed"])


def moved(before: dict, after: dict, key: tuple[str, str]) -> tuple[Decimal, Decimal, Decimal]:
    """How (total, locked, unconfirmed) of a reserve changed."""
    old, new = amounts(before[key]), amounts(after[key])
    return new[0] - old[0], new[1] - old[1], new[2] - old[2]


def adjustment(
    kind: str, code: str, amount: Any, to: tuple[str, str], source: Any = None, **extra: Any
) -> dict:
    body = {
        "kind": kind,
        "code": code,
        "amount": Decimal(amount),
        "toReserve": {"name": to[0], "type": to[1]},
    }
    if source:
        body["fromReserve"] = {"name": source[0], "type": source[1]}
    return {**body, **extra}


HOT = ("hot-wallet", "HotWallet")
BANK = ("bank", "Exchange")


def test_every_configured_asset_has_its_built_in_reserve(auditor: Api) -> None:
    found = reserves(auditor)
    assert {("hot-wallet", code) for code in SETTINGS.cryptos} <= set(found)
    assert {("bank", code) for code in SETTINGS.currencies} <= set(found)
    assert found["hot-wallet", "BTC"]["type"] == "HotWallet"
    assert found["bank", "EUR"]["type"] == "Exchange"


def test_opening_balances_and_moves_show_in_the_reserves(operator: Api, broker: Api) -> None:
    cold = (f"cold-{uuid.uuid4().hex[:8]}", "ColdStore")
    before = reserves(broker)
    opened = expect(
        operator.post_json("/reserves/adjustments", adjustment("OpeningBalance", "BTC", 10, HOT)), 201
    )
    assert (opened["kind"], opened["code"], opened["amount"], opened["fromReserve"]) == (
        "OpeningBalance",
        "BTC",
        10,
        None,
    )
    assert opened["adjustmentCode"].startswith("RA")
    expect(
        operator.post_json("/reserves/adjustments", adjustment("OpeningBalance", "EUR", "100000.00", BANK)),
        201,
    )
    move = adjustment("Move", "BTC", "1.5", cold, HOT, note="to cold storage")
    assert expect(operator.post_json("/reserves/adjustments", move), 201)["note"] == "to cold storage"
    after = reserves(broker)
    assert moved(before, after, ("hot-wallet", "BTC")) == (Decimal("8.5"), 0, 0)
    assert moved(before, after, ("bank", "EUR")) == (Decimal(100000), 0, 0)
    stored = after[cold[0], "BTC"]
    assert (stored["type"], amounts(stored)) == ("ColdStore", (Decimal("1.5"), 0, 0))
    assert stored["updated"] is not None


def test_an_adjustment_code_records_once_and_cannot_be_reused_for_another(operator: Api, broker: Api) -> None:
    code = f"RA-e2e-{uuid.uuid4().hex[:8]}"
    body = adjustment("OpeningBalance", "ETH", "0.25", HOT, adjustmentCode=code)
    first = expect(operator.post_json("/reserves/adjustments", body), 201)
    before = reserves(broker)
    assert expect(operator.post_json("/reserves/adjustments", body), 201) == first
    assert moved(before, reserves(broker), ("hot-wallet", "ETH")) == (0, 0, 0)
    other = {**body, "amount": Decimal("0.26")}
    expect_problem(operator.post_json("/reserves/adjustments", other), 409, "reserve_adjustment_conflict")


def test_a_buy_locks_its_crypto_until_the_sendout_takes_it_from_the_hot_wallet(
    broker: Api, operator: Api, customer: Customer
) -> None:
    before = reserves(broker)
    tx = expect(broker.post_json("/brokerbuy", buy_body(customer, 250)), 201)["transaction"]
    sent = Decimal(tx["executedAmounts"]["cryptoAmount"]) + NETWORK_FEE
    committed = reserves(broker)
    assert moved(before, committed, ("hot-wallet", "BTC")) == (0, sent, 0)
    assert moved(before, committed, ("bank", "EUR")) == (0, 0, 0)

    sendout = {"transactionCode": tx["transactionCode"], "txId": uuid.uuid4().hex, "confirmations": REQUIRED}
    assert expect(operator.post_json("/chain/sendouts", sendout), 200)["transaction"]["status"] == "COMPLETED"
    completed = reserves(broker)
    assert moved(before, completed, ("hot-wallet", "BTC")) == (-sent, 0, 0)
    assert moved(before, completed, ("bank", "EUR")) == (Decimal("250.00"), 0, 0)


def test_a_sell_is_unconfirmed_then_received_and_its_payout_locked_until_paid(
    broker: Api, operator: Api, customer: Customer
) -> None:
    before = reserves(broker)
    tx = expect(
        broker.post_json("/paymentrequest/brokersell", sell_body(customer, cryptoAmount=Decimal("0.003"))),
        201,
    )["transaction"]
    payout = Decimal(tx["executedAmounts"]["fiatValue"])
    deposit = {
        "cryptoCode": "BTC",
        "address": tx["destinationCryptoAddress"],
        "txId": uuid.uuid4().hex,
        "cryptoAmount": Decimal("0.003"),
        "confirmations": 0,
    }
    assert (
        expect(operator.post_json("/chain/deposits", deposit), 200)["transaction"]["status"] == "Confirming"
    )
    assert moved(before, reserves(broker), ("hot-wallet", "BTC")) == (0, 0, Decimal("0.003"))

    confirmed = {**deposit, "confirmations": REQUIRED}
    assert (
        expect(operator.post_json("/chain/deposits", confirmed), 200)["transaction"]["status"] == "ToPayout"
    )
    received = reserves(broker)
    assert moved(before, received, ("hot-wallet", "BTC")) == (Decimal("0.003"), 0, 0)
    assert moved(before, received, ("bank", "EUR")) == (0, payout, 0)

    code = tx["transactionCode"]
    assert (
        expect(operator.put(f"/transactions/custodian/{code}/payout"), 200)["transaction"]["status"]
        == "COMPLETED"
    )
    assert moved(before, reserves(broker), ("bank", "EUR")) == (-payout, 0, 0)


def test_a_move_beyond_what_a_reserve_holds_is_refused_and_records_nothing(
    operator: Api, broker: Api
) -> None:
    cold = (f"cold-{uuid.uuid4().hex[:8]}", "ColdStore")
    expect(operator.post_json("/reserves/adjustments", adjustment("OpeningBalance", "LTC", 1, cold)), 201)
    before = reserves(broker)
    hot_ltc = Decimal(before["hot-wallet", "LTC"]["total"])

    huge = adjustment("Move", "LTC", 1_000_000, cold, HOT)
    problem = expect_problem(operator.post_json("/reserves/adjustments", huge), 409, "insufficient_reserve")
    assert f"reserve hot-wallet holds {hot_ltc:f} LTC" in problem["detail"]
    assert "1000000 LTC" in problem["detail"]

    code = f"RA-e2e-{uuid.uuid4().hex[:8]}"
    too_much = adjustment("Move", "LTC", "1.5", HOT, cold, adjustmentCode=code)
    problem = expect_problem(
        operator.post_json("/reserves/adjustments", too_much), 409, "insufficient_reserve"
    )
    assert problem["detail"].startswith(f"reserve {cold[0]} holds 1.00000000 LTC, less than the 1.5 LTC")
    assert reserves(broker) == before

    fits = {**too_much, "amount": Decimal("0.25")}  # the refused request left its code unused
    assert expect(operator.post_json("/reserves/adjustments", fits), 201)["adjustmentCode"] == code
    assert moved(before, reserves(broker), (cold[0], "LTC")) == (Decimal("-0.25"), 0, 0)


def test_reserves_are_read_by_brokers_operators_and_auditors_and_adjusted_by_operators_only(
    broker: Api, operator: Api, auditor: Api
) -> None:
    for api in (broker, operator, auditor):
        reserves(api)
    body = adjustment("OpeningBalance", "BTC", 1, HOT)
    expect_problem(broker.post_json("/reserves/adjustments", body), 403, "forbidden")
    expect_problem(auditor.post_json("/reserves/adjustments", body), 403, "forbidden")


@pytest.mark.parametrize(
    ("body", "code"),
    [
        (adjustment("OpeningBalance", "EUR", 100, HOT), "reserve_cannot_hold_asset"),
        (adjustment("OpeningBalance", "XRP", 100, BANK), "asset_unknown"),
        (adjustment("OpeningBalance", "BTC", "0.000000001", HOT), "amount_too_precise"),
        (adjustment("OpeningBalance", "BTC", 0, HOT), "amount_not_positive"),
        (adjustment("OpeningBalance", "EUR", 1, ("bank", "ColdStore")), "reserve_type_mismatch"),
        (adjustment("Move", "BTC", 1, HOT), "reserve_adjustment_shape_invalid"),
        (adjustment("Move", "BTC", 1, HOT, HOT), "reserve_move_to_same_reserve"),
        (adjustment("OpeningBalance", "BTC", 1, ("vault", "Vault")), "validation_failed"),
        ({**adjustment("OpeningBalance", "BTC", 1, HOT), "colour": "red"}, "validation_failed"),
    ],
)
def test_a_bad_adjustment_is_a_problem_and_records_nothing(
    operator: Api, broker: Api, body: dict[str, Any], code: str
) -> None:
    before = reserves(broker)
    expect_problem(operator.post_json("/reserves/adjustments", body), 422, code)
    assert reserves(broker) == before
