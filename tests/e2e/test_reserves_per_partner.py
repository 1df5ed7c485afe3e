"""Reserves are each partner's own book, over HTTP: a partner's `GET /reserves` shows its own reserves and
what its own trades locked or moved, and its operator adjusts only its own reserves. Partner `demo` (with
Payouts) and partner `other` (without) each have their built-in `hot-wallet` and `bank`.

The server and its database are shared by every end-to-end test: reserves are compared before and after each
step, and new reserves get unique names. A partner's read waits for its own last write only, so a test reads
the partner that wrote last first, then the other one.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from decimal import Decimal
from typing import Any

from tests.e2e.support import Api, Customer, buy_body, deposit_report, expect, expect_problem, sell_body
from tests.e2e.test_reserves import BANK, HOT, NETWORK_FEE, REQUIRED, adjustment, moved, reserves


def new_cold_store() -> tuple[str, str]:
    return (f"cold-{uuid.uuid4().hex[:8]}", "ColdStore")


def adjust(operator: Api, body: dict[str, Any]) -> Any:
    return operator.post_json("/reserves/adjustments", body)


def test_another_partners_buy_locks_and_moves_its_own_reserves_and_leaves_a_partners_unchanged(
    broker: Api, operator: Api, other_broker: Api, customer: Customer
) -> None:
    others_before, before = reserves(other_broker), reserves(broker)
    tx = expect(broker.post_json("/brokerbuy", buy_body(customer, 250)), 201)["transaction"]
    sent = Decimal(tx["executedAmounts"]["cryptoAmount"]) + NETWORK_FEE
    assert moved(before, reserves(broker), ("hot-wallet", "BTC")) == (0, sent, 0)
    assert reserves(other_broker) == others_before  # demo's buy locks nothing of other's hot wallet

    sendout = {"transactionCode": tx["transactionCode"], "txId": uuid.uuid4().hex, "confirmations": REQUIRED}
    assert expect(operator.post_json("/chain/sendouts", sendout), 200)["transaction"]["status"] == "COMPLETED"
    completed = reserves(broker)
    assert moved(before, completed, ("hot-wallet", "BTC")) == (-sent, 0, 0)
    assert moved(before, completed, ("bank", "EUR")) == (Decimal("250.00"), 0, 0)
    assert reserves(other_broker) == others_before


def test_a_partners_sell_moves_its_own_reserves_and_leaves_another_partners_unchanged(
    broker: Api,
    other_broker: Api,
    other_operator: Api,
    make_customer: Callable[..., Customer],
) -> None:
    seller = make_customer(other_broker)
    before, demos_before = reserves(other_broker), reserves(broker)
    body = sell_body(seller, cryptoAmount=Decimal("0.002"))
    tx = expect(other_broker.post_json("/paymentrequest/brokersell", body), 201)["transaction"]
    paid = expect(other_operator.post_json("/chain/deposits", deposit_report(tx, REQUIRED)), 200)
    assert paid["transaction"]["status"] == "COMPLETED"  # other has no Payouts: received and paid out at once
    after = reserves(other_broker)
    payout = Decimal(tx["executedAmounts"]["fiatValue"])
    assert moved(before, after, ("hot-wallet", "BTC")) == (Decimal("0.002"), 0, 0)
    assert moved(before, after, ("bank", "EUR")) == (-payout, 0, 0)
    assert reserves(broker) == demos_before


def test_another_partners_operator_cannot_move_a_partners_reserve(
    operator: Api, broker: Api, other_operator: Api, other_broker: Api
) -> None:
    cold = new_cold_store()
    expect(adjust(operator, adjustment("OpeningBalance", "BTC", 1, cold)), 201)
    demos_before, others_before = reserves(broker), reserves(other_broker)

    taken = expect_problem(
        adjust(other_operator, adjustment("Move", "BTC", "0.5", HOT, cold)), 409, "insufficient_reserve"
    )
    never_named = new_cold_store()
    unknown = expect_problem(
        adjust(other_operator, adjustment("Move", "BTC", "0.5", HOT, never_named)),
        409,
        "insufficient_reserve",
    )
    assert taken["detail"].startswith(f"reserve {cold[0]} holds 0.00000000 BTC, less than the 0.5 BTC")
    assert taken["detail"].replace(cold[0], "?") == unknown["detail"].replace(never_named[0], "?")
    assert reserves(broker) == demos_before
    assert reserves(other_broker) == others_before


def test_a_partners_reserves_are_not_listed_to_another_partner(
    operator: Api, broker: Api, other_broker: Api, other_operator: Api
) -> None:
    demos, others = new_cold_store(), new_cold_store()
    expect(adjust(operator, adjustment("OpeningBalance", "BTC", "0.7", demos)), 201)
    expect(adjust(other_operator, adjustment("OpeningBalance", "ETH", "0.3", others)), 201)
    assert (demos[0], "BTC") in reserves(broker)
    assert (others[0], "ETH") not in reserves(broker)
    listed = reserves(other_broker)
    assert (others[0], "ETH") in listed
    assert (demos[0], "BTC") not in listed


def test_an_opening_balance_into_another_partners_reserve_name_opens_the_partners_own(
    operator: Api, broker: Api, other_operator: Api, other_broker: Api
) -> None:
    name = new_cold_store()[0]
    expect(adjust(operator, adjustment("OpeningBalance", "BTC", 2, (name, "ColdStore"))), 201)
    demos_before = reserves(broker)
    others_before = reserves(other_broker)

    exchange = (name, "Exchange")  # not a reserve_type_mismatch: demo's ColdStore of that name is not other's
    expect(adjust(other_operator, adjustment("OpeningBalance", "EUR", "40.00", exchange)), 201)
    after = reserves(other_broker)
    assert (name, "EUR") not in others_before
    assert (after[name, "EUR"]["type"], after[name, "EUR"]["total"]) == ("Exchange", 40)
    assert (name, "BTC") not in after
    assert reserves(broker) == demos_before


def test_an_adjustment_code_of_another_partner_is_unknown_to_a_partner(
    operator: Api, broker: Api, other_operator: Api, other_broker: Api
) -> None:
    code = f"RA-e2e-{uuid.uuid4().hex[:8]}"
    demos = expect(
        adjust(operator, adjustment("OpeningBalance", "EUR", "10.00", BANK, adjustmentCode=code)), 201
    )
    others_before = reserves(other_broker)
    body = adjustment("OpeningBalance", "EUR", "20.00", BANK, adjustmentCode=code)
    others = expect(adjust(other_operator, body), 201)  # not a conflict with demo's: other's own code
    assert (others["adjustmentCode"], others["amount"], demos["amount"]) == (code, 20, 10)
    assert moved(others_before, reserves(other_broker), ("bank", "EUR")) == (Decimal(20), 0, 0)
    assert expect(adjust(other_operator, body), 201) == others  # recorded once, under other's code
    expect_problem(adjust(operator, {**body, "amount": Decimal("10.01")}), 409, "reserve_adjustment_conflict")
