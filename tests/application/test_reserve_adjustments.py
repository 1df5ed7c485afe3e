"""The operator's reserve adjustments as use cases of the `Ledger`, against PostgreSQL."""

from __future__ import annotations

from decimal import Decimal

import pytest

from application.commands import AdjustmentRequest
from application.ledger import Ledger
from domain.errors import (
    AssetUnknown,
    ReserveAdjustmentConflict,
    ReserveAdjustmentShapeInvalid,
    ReserveCannotHoldAsset,
    ReserveTypeMismatch,
)
from domain.reserves import ReserveAdjustment, ReservePlace, ReserveType


def opening(
    code: str = "BTC", amount: str = "2", to: str = "hot-wallet", kind: str = "HotWallet"
) -> AdjustmentRequest:
    return AdjustmentRequest("OpeningBalance", code, Decimal(amount), to, kind)


def move(to: str = "cold-1", to_type: str = "ColdStore", amount: str = "1") -> AdjustmentRequest:
    return AdjustmentRequest(
        "Move", "BTC", Decimal(amount), to, to_type, "hot-wallet", "HotWallet", "to cold"
    )


def test_an_opening_balance_is_recorded_under_its_code(ledger: Ledger) -> None:
    recorded = ledger.record_adjustment(opening(), "RA-OPEN-1")
    stored = ledger.repository.get(ReserveAdjustment.create_id("RA-OPEN-1"))
    assert (stored.code, stored.kind, stored.asset_code, stored.amount) == (
        "RA-OPEN-1",
        "OpeningBalance",
        "BTC",
        Decimal(2),
    )
    assert stored.__dict__ == recorded.__dict__


def test_the_same_request_under_the_same_code_records_once(ledger: Ledger) -> None:
    first = ledger.record_adjustment(opening(), "RA-1")
    head = ledger.recorder.max_notification_id()
    again = ledger.record_adjustment(opening(), "RA-1")
    assert again.id == first.id and again.version == first.version
    assert ledger.recorder.max_notification_id() == head


def test_another_request_under_a_used_code_is_refused(ledger: Ledger) -> None:
    ledger.record_adjustment(opening(), "RA-1")
    with pytest.raises(ReserveAdjustmentConflict):
        ledger.record_adjustment(opening(amount="3"), "RA-1")


def test_without_a_code_each_request_is_a_new_adjustment(ledger: Ledger) -> None:
    assert ledger.record_adjustment(opening()).code != ledger.record_adjustment(opening()).code


def test_a_move_names_its_new_reserve_which_keeps_its_type(ledger: Ledger) -> None:
    ledger.record_adjustment(move())
    place = ledger.repository.get(ReservePlace.create_id("cold-1"))
    assert place.type == ReserveType.COLD_STORE
    head = ledger.recorder.max_notification_id()
    with pytest.raises(ReserveTypeMismatch):
        ledger.record_adjustment(move(to_type="Exchange"))
    assert ledger.recorder.max_notification_id() == head
    ledger.record_adjustment(move(amount="0.5"))
    assert ledger.repository.get(ReservePlace.create_id("cold-1")).version == place.version


@pytest.mark.parametrize(
    ("request_", "error"),
    [
        (opening(code="XRP"), AssetUnknown),
        (opening(code="EUR", amount="10"), ReserveCannotHoldAsset),
        (opening(to="bank", kind="ColdStore"), ReserveTypeMismatch),
        (AdjustmentRequest("Move", "EUR", Decimal(1), "bank", "Exchange"), ReserveAdjustmentShapeInvalid),
        (AdjustmentRequest("Burn", "EUR", Decimal(1), "bank", "Exchange"), ReserveAdjustmentShapeInvalid),
    ],
)
def test_bad_adjustments_are_refused_and_record_nothing(
    ledger: Ledger, request_: AdjustmentRequest, error: type[Exception]
) -> None:
    head = ledger.recorder.max_notification_id()
    with pytest.raises(error):
        ledger.record_adjustment(request_, "RA-BAD")
    assert ledger.recorder.max_notification_id() == head
    assert ledger.adjustment("RA-BAD") is None
