"""`audit verify`'s postings check fails when a reserve that must not be negative is: an operator's reserve
(moved only by adjustments, never below zero by a move) below zero is named with what it holds; the built-in
hot wallet and bank, which trades draw whatever they hold, may be below zero."""

from __future__ import annotations

from collections.abc import Iterator
from decimal import Decimal

import pytest

from application.commands import AdjustmentRequest
from application.ledger import Ledger
from domain.reserves import BUILT_IN, ReserveAdjustment, ReservePlace
from projections.audit import check_postings, verify
from tests.projections.audit_support import catch_up, new_ledger, own_database


@pytest.fixture
def url(database_url: str) -> Iterator[str]:
    with own_database(database_url) as url:
        yield url


@pytest.fixture
def ledger(url: str) -> Iterator[Ledger]:
    ledger = new_ledger(url)
    try:
        yield ledger
    finally:
        ledger.close()


def written_past_the_rule(ledger: Ledger, request: AdjustmentRequest, code: str) -> None:
    """Records an adjustment without the reserve check (as a ledger before the rule, or a bug, would)."""
    movement = ledger.reserves.movement(request)
    at = ledger.clock.now()
    places = [
        ReservePlace(place.name, place.type.value, at)
        for place in movement.reserves
        if place.name not in BUILT_IN and ledger.store.find(ReservePlace.create_id(place.name)) is None
    ]
    ledger.save(ReserveAdjustment.record(code, movement, None, at), *places)


def move(amount: str, to: str, to_type: str, source: str, source_type: str) -> AdjustmentRequest:
    return AdjustmentRequest("Move", "BTC", Decimal(amount), to, to_type, source, source_type)


def test_an_operators_reserve_below_zero_fails_the_postings_check_and_verify(
    url: str, ledger: Ledger
) -> None:
    ledger.record_adjustment(AdjustmentRequest("OpeningBalance", "BTC", Decimal(1), "cold-a", "ColdStore"))
    catch_up(url)
    assert check_postings(url).status == "OK"

    written_past_the_rule(ledger, move("1.5", "hot-wallet", "HotWallet", "cold-a", "ColdStore"), "RA-PAST")
    catch_up(url)

    result = check_postings(url)
    assert result.status == "FAILED"
    assert any(line.startswith("reserve cold-a holds -0.5") and "BTC" in line for line in result.details)
    assert not verify(url).ok


def test_the_hot_wallet_below_zero_does_not_fail_the_postings_check(url: str, ledger: Ledger) -> None:
    written_past_the_rule(ledger, move("2", "cold-b", "ColdStore", "hot-wallet", "HotWallet"), "RA-HOT")
    catch_up(url)
    result = check_postings(url)
    assert result.status == "OK", result.details
    assert "no reserve that must not be negative is" in result.details[0]
