"""`audit verify`'s postings check fails when a reserve that must not be negative is, in any partner's books:
an operator's reserve (moved only by its partner's adjustments, never below zero by a move) below zero is
named with its partner and what it holds; the built-in hot wallet and bank, which trades draw whatever they
hold, may be below zero; and each partner's books must balance on their own."""

from __future__ import annotations

from collections.abc import Iterator
from decimal import Decimal

import psycopg
import pytest

from application.commands import AdjustmentRequest
from application.ledger import Ledger
from application.use_cases import UseCases
from domain.reserves import BUILT_IN, ReserveAdjustment, ReservePlace
from projections.audit import check_postings, verify
from tests.application.conftest import use_cases_of
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


@pytest.fixture
def use_cases(ledger: Ledger) -> UseCases:
    return use_cases_of(ledger)


def written_past_the_rule(
    use_cases: UseCases, request: AdjustmentRequest, code: str, partner: str = "demo"
) -> None:
    """Records an adjustment without the reserve check (as a ledger before the rule, or a bug, would)."""
    movement = use_cases.reserves.movement(request)
    at = use_cases.ledger.clock.now()
    places = [
        ReservePlace.named(partner, place, at)
        for place in movement.reserves
        if place.name not in BUILT_IN
        and use_cases.ledger.store.find(ReservePlace.create_id(partner, place.name)) is None
    ]
    use_cases.ledger.save(ReserveAdjustment.record(partner, code, movement, None, at), *places)


def move(amount: str, to: str, to_type: str, source: str, source_type: str) -> AdjustmentRequest:
    return AdjustmentRequest("Move", "BTC", Decimal(amount), to, to_type, source, source_type)


def test_an_operators_reserve_below_zero_fails_the_postings_check_and_verify(
    url: str, use_cases: UseCases
) -> None:
    use_cases.reserves.record_adjustment(
        "demo", AdjustmentRequest("OpeningBalance", "BTC", Decimal(1), "cold-a", "ColdStore")
    )
    catch_up(url)
    assert check_postings(url).status == "OK"

    written_past_the_rule(use_cases, move("1.5", "hot-wallet", "HotWallet", "cold-a", "ColdStore"), "RA-PAST")
    catch_up(url)

    result = check_postings(url)
    assert result.status == "FAILED"
    assert any(
        line.startswith("reserve cold-a of partner demo holds -0.5") and "BTC" in line
        for line in result.details
    )
    assert not verify(url).ok


def test_a_partners_reserve_is_checked_in_its_own_books_not_against_another_partners(
    url: str, use_cases: UseCases
) -> None:
    """other's cold-a holds 1 BTC, demo's nothing: demo's cold-a drawn below zero fails, whatever other's
    holds."""
    use_cases.reserves.record_adjustment(
        "other", AdjustmentRequest("OpeningBalance", "BTC", Decimal(1), "cold-a", "ColdStore")
    )
    written_past_the_rule(use_cases, move("0.5", "hot-wallet", "HotWallet", "cold-a", "ColdStore"), "RA-PAST")
    catch_up(url)

    result = check_postings(url)
    assert result.status == "FAILED"
    assert [line for line in result.details if "cold-a" in line] == [
        "reserve cold-a of partner demo holds -0.5 BTC: below zero, which no move may leave it (only the "
        "built-in hot-wallet and bank may be drawn below zero, by trades)"
    ]


def test_postings_that_balance_overall_but_not_in_each_partners_books_fail_the_postings_check(
    url: str, use_cases: UseCases
) -> None:
    use_cases.reserves.record_adjustment(
        "demo", AdjustmentRequest("OpeningBalance", "EUR", Decimal(10), "bank", "Exchange")
    )
    catch_up(url)
    with psycopg.connect(url, autocommit=True) as conn:  # the equity side booked as other's: written wrong
        conn.execute("UPDATE read.postings SET partner = 'other' WHERE account = 'equity'")
    result = check_postings(url)
    assert result.status == "FAILED"
    assert sorted(line for line in result.details if line.startswith("partner")) == [
        "partner demo, EUR: debits - credits = 10",
        "partner other, EUR: debits - credits = -10",
    ]


def test_the_hot_wallet_below_zero_does_not_fail_the_postings_check(url: str, use_cases: UseCases) -> None:
    written_past_the_rule(use_cases, move("2", "cold-b", "ColdStore", "hot-wallet", "HotWallet"), "RA-HOT")
    catch_up(url)
    result = check_postings(url)
    assert result.status == "OK", result.details
    assert "no reserve that must not be negative is" in result.details[0]
