"""Reserves and their adjustments in the domain: named rules, each refused with its own error."""

from __future__ import annotations

from decimal import Decimal

import pytest

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
    AdjustmentKind,
    Movement,
    Reserve,
    ReserveAdjustment,
    ReservePlace,
    ReserveType,
    check_movement,
    reserve,
)
from tests.unit.builders import BTC, EUR, NOW

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
    adjustment = ReserveAdjustment.record("RA1", move(), "to cold storage", NOW)
    assert adjustment.id == ReserveAdjustment.create_id("RA1")
    assert (adjustment.kind, adjustment.asset_code, adjustment.amount) == ("Move", "BTC", Decimal("0.5"))
    assert (adjustment.source, adjustment.to, adjustment.created) == (HOT, COLD, NOW)
    adjustment.check_same(move(), "to cold storage")
    with pytest.raises(ReserveAdjustmentConflict):
        adjustment.check_same(move(amount="0.6"), "to cold storage")
    with pytest.raises(ReserveAdjustmentConflict):
        adjustment.check_same(move(), None)


def test_a_refused_adjustment_records_nothing() -> None:
    with pytest.raises(ReserveCannotHoldAsset):
        ReserveAdjustment.record("RA2", opening("1", to=COLD, crypto=False), None, NOW)


def test_a_named_reserve_keeps_the_type_it_was_first_given() -> None:
    place = ReservePlace("cold-1", "ColdStore", NOW)
    place.check_type(COLD)
    with pytest.raises(ReserveTypeMismatch):
        place.check_type(Reserve("cold-1", ReserveType.EXCHANGE))
