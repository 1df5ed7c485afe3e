"""Reserves and their adjustments in the domain: named rules, each refused with its own error; reserves,
adjustments and books are each partner's own, and what an event does to reserves is its partner's."""

from __future__ import annotations

from decimal import Decimal

import pytest
from eventsourcing.persistence import StoredEvent
from eventsourcing.utils import get_topic

from application.store.log import LedgerLog
from domain.errors import (
    AmountNotPositive,
    AmountTooPrecise,
    ReserveAdjustmentConflict,
    ReserveAdjustmentShapeInvalid,
    ReserveCannotHoldAsset,
    ReserveMoveToSameReserve,
    ReserveTypeMismatch,
    ReserveTypeUnknown,
    ValidationFailed,
)
from domain.reserves import (
    NO_PARTNER,
    AdjustmentKind,
    Movement,
    Reserve,
    ReserveAdjustment,
    ReserveBook,
    ReserveChange,
    ReservePlace,
    ReserveType,
    check_movement,
    reserve,
    reserve_changes,
)
from domain.transaction import ChainPayment
from tests.unit.builders import BTC, EUR, LATER, NOW, REQUIRED, deposit, initiated_sell, staged_buy

HOT = Reserve("hot-wallet", ReserveType.HOT_WALLET)
COLD = Reserve("cold-1", ReserveType.COLD_STORE)
BANK = Reserve("bank", ReserveType.EXCHANGE)


def opening(amount: str = "1.5", to: Reserve = HOT, crypto: bool = True) -> Movement:
    return Movement(AdjustmentKind.OPENING_BALANCE, BTC if crypto else EUR, crypto, Decimal(amount), to)


def move(source: Reserve = HOT, to: Reserve = COLD, amount: str = "0.5") -> Movement:
    return Movement(AdjustmentKind.MOVE, BTC, True, Decimal(amount), to, source)


def test_a_reserve_named_in_a_request_has_a_known_type_and_the_built_ins_keep_theirs() -> None:
    assert reserve("cold-1", "ColdStore") == COLD
    assert reserve("bank", "Exchange") == BANK
    with pytest.raises(ReserveTypeUnknown):
        reserve("cold-1", "Vault")
    with pytest.raises(ReserveTypeMismatch):
        reserve("hot-wallet", "ColdStore")
    with pytest.raises(ValidationFailed):
        reserve("", "ColdStore")


def test_amounts_are_positive_and_exact_at_the_assets_precision() -> None:
    check_movement(opening("0.00000001"))
    with pytest.raises(AmountNotPositive):
        check_movement(opening("0"))
    with pytest.raises(AmountTooPrecise):
        check_movement(opening("0.000000001"))
    with pytest.raises(AmountTooPrecise):
        check_movement(opening("10.001", to=BANK, crypto=False))


def test_an_opening_balance_names_one_reserve_and_a_move_two_different_ones() -> None:
    check_movement(move())
    with pytest.raises(ReserveAdjustmentShapeInvalid):
        check_movement(Movement(AdjustmentKind.OPENING_BALANCE, BTC, True, Decimal(1), COLD, HOT))
    with pytest.raises(ReserveAdjustmentShapeInvalid):
        check_movement(Movement(AdjustmentKind.MOVE, BTC, True, Decimal(1), COLD))
    with pytest.raises(ReserveMoveToSameReserve):
        check_movement(move(source=COLD, to=COLD))


def test_hot_wallets_and_cold_stores_hold_crypto_only_and_exchanges_hold_both() -> None:
    check_movement(opening(to=BANK, crypto=False))
    check_movement(opening(to=BANK))
    with pytest.raises(ReserveCannotHoldAsset):
        check_movement(opening("100", to=COLD, crypto=False))


def test_an_adjustment_is_recorded_with_its_code_and_a_second_request_must_be_the_same() -> None:
    adjustment = ReserveAdjustment.record("demo", "RA1", move(), "to cold storage", NOW)
    assert adjustment.id == ReserveAdjustment.create_id("demo", "RA1")
    assert adjustment.partner == "demo"
    assert (adjustment.kind, adjustment.asset_code, adjustment.amount) == ("Move", "BTC", Decimal("0.5"))
    assert (adjustment.source, adjustment.to, adjustment.created) == (HOT, COLD, NOW)
    adjustment.check_same(move(), "to cold storage")
    with pytest.raises(ReserveAdjustmentConflict):
        adjustment.check_same(move(amount="0.6"), "to cold storage")
    with pytest.raises(ReserveAdjustmentConflict):
        adjustment.check_same(move(), None)


def test_a_refused_adjustment_records_nothing() -> None:
    with pytest.raises(ReserveCannotHoldAsset):
        ReserveAdjustment.record("demo", "RA2", opening("1", to=COLD, crypto=False), None, NOW)


def test_a_named_reserve_keeps_the_type_it_was_first_given() -> None:
    place = ReservePlace.named("demo", COLD, NOW)
    place.check_type(COLD)
    with pytest.raises(ReserveTypeMismatch):
        place.check_type(Reserve("cold-1", ReserveType.EXCHANGE))


def test_reserves_adjustment_codes_and_books_of_two_partners_are_different_aggregates() -> None:
    assert ReservePlace.named("demo", COLD, NOW).id == ReservePlace.create_id("demo", "cold-1")
    assert ReservePlace.create_id("demo", "cold-1") != ReservePlace.create_id("other", "cold-1")
    assert ReserveAdjustment.create_id("demo", "RA1") != ReserveAdjustment.create_id("other", "RA1")
    assert ReserveBook.of("demo", "BTC").id == ReserveBook.create_id("demo", "BTC")
    assert ReserveBook.create_id("demo", "BTC") != ReserveBook.create_id("other", "BTC")


def test_an_adjustment_changes_the_reserves_of_its_own_partner() -> None:
    [recorded] = ReserveAdjustment.record("other", "RA3", move(), None, NOW).collect_events()
    assert reserve_changes(recorded) == [
        ReserveChange("other", "cold-1", "BTC", Decimal("0.5")),
        ReserveChange("other", "hot-wallet", "BTC", Decimal("-0.5")),
    ]


def test_a_trade_changes_the_built_in_reserves_of_its_own_partner_only() -> None:
    buy = staged_buy(partner="other")
    buy.commit(LATER)
    buy.report_sendout(ChainPayment("sendout-1", REQUIRED, Decimal(0)), REQUIRED, LATER)
    completed = buy.collect_events()[-1]
    quote = buy.order.quote
    assert reserve_changes(completed, buy.order) == [
        ReserveChange("other", "hot-wallet", "BTC", -(quote.crypto_amount + quote.fees.network_crypto)),
        ReserveChange("other", "bank", "EUR", quote.fiat_value),
    ]
    sell = initiated_sell(partner="demo")
    sell.report_deposit(deposit(sell), REQUIRED, True, LATER)
    to_payout = sell.collect_events()[-1]
    received = ReserveChange("demo", "hot-wallet", "BTC", sell.order.quote.crypto_amount)
    assert reserve_changes(to_payout, sell.order) == [received]


def test_an_adjustment_recorded_before_reserves_were_per_partner_belongs_to_no_partner() -> None:
    """Its stored event (class version 1) names no partner: it is read as no partner's, whose reserves no
    partner sees or moves."""
    mapper = LedgerLog(env={"PERSISTENCE_MODULE": "eventsourcing.popo"}).mapper
    [recorded] = ReserveAdjustment.record("demo", "RA4", opening(), None, NOW).collect_events()
    stored = mapper.to_stored_event(recorded)
    version_1 = stored.state.replace(b'"partner":"demo",', b"").replace(b',"class_version":2', b"")
    assert b"partner" not in version_1 and b"class_version" not in version_1
    old = mapper.to_domain_event(
        StoredEvent(stored.originator_id, 1, get_topic(ReserveAdjustment.Recorded), version_1)
    )
    assert (old.partner, old.code, old.amount) == (NO_PARTNER, "RA4", Decimal("1.5"))
    assert reserve_changes(old) == [ReserveChange(NO_PARTNER, "hot-wallet", "BTC", Decimal("1.5"))]
