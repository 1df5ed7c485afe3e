"""Trust-level limit windows: reserve within the limit, idempotently per transaction; release gives back."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from domain.errors import TrustLevelLimitExceeded
from domain.limits import LimitWindow, period_key
from tests.unit.builders import assert_nothing_recorded, assert_refused, store

LIMIT = Decimal("1000.00")
CENT = Decimal("0.01")


def window(direction: str = "buy", period: str = "daily", key: str = "2026-11-21") -> LimitWindow:
    return LimitWindow(
        partner="partner-a", customer_code="CUST1", direction=direction, period=period, key=key
    )


def test_a_new_window_has_used_nothing() -> None:
    fresh = window()
    assert fresh.used == 0
    assert fresh.reservations == {}
    assert fresh.remaining(LIMIT) == LIMIT


def test_a_reservation_within_the_limit_is_counted() -> None:
    used = window()
    used.reserve("T1", Decimal("400.00"), LIMIT, "EUR")
    used.reserve("T2", Decimal("100.50"), LIMIT, "EUR")
    assert used.used == Decimal("500.50")
    assert used.remaining(LIMIT) == Decimal("499.50")
    assert used.reservations == {"T1": Decimal("400.00"), "T2": Decimal("100.50")}


def test_a_reservation_that_reaches_the_limit_exactly_is_allowed() -> None:
    full = window()
    full.reserve("T1", Decimal("600.00"), LIMIT, "EUR")
    full.reserve("T2", Decimal("400.00"), LIMIT, "EUR")
    assert full.used == LIMIT
    assert full.remaining(LIMIT) == 0


def test_a_reservation_one_cent_over_the_limit_is_refused() -> None:
    full = window()
    full.reserve("T1", Decimal("600.00"), LIMIT, "EUR")
    error = assert_refused(
        full,
        TrustLevelLimitExceeded,
        lambda: full.reserve("T2", Decimal("400.00") + CENT, LIMIT, "EUR"),
    )
    assert "400 EUR remaining" in error.detail
    assert full.used == Decimal("600.00")


def test_reserving_twice_for_the_same_transaction_counts_once() -> None:
    used = window()
    used.reserve("T1", Decimal("700.00"), LIMIT, "EUR")
    assert_nothing_recorded(used, lambda: used.reserve("T1", Decimal("700.00"), LIMIT, "EUR"))
    assert used.used == Decimal("700.00")


def test_release_gives_the_reservation_back() -> None:
    used = window()
    used.reserve("T1", Decimal("700.00"), LIMIT, "EUR")
    used.reserve("T2", Decimal("300.00"), LIMIT, "EUR")
    used.release("T1")
    assert used.used == Decimal("300.00")
    assert "T1" not in used.reservations
    used.reserve("T3", Decimal("700.00"), LIMIT, "EUR")
    assert used.used == LIMIT


def test_releasing_an_unknown_or_released_transaction_changes_nothing() -> None:
    used = window()
    used.reserve("T1", Decimal("700.00"), LIMIT, "EUR")
    assert_nothing_recorded(used, lambda: used.release("T9"))
    used.release("T1")
    assert_nothing_recorded(used, lambda: used.release("T1"))
    assert used.used == 0


def test_remaining_is_never_negative_when_the_limit_is_lowered_below_what_is_used() -> None:
    used = window()
    used.reserve("T1", Decimal("700.00"), LIMIT, "EUR")
    assert used.remaining(Decimal("500.00")) == 0
    with pytest.raises(TrustLevelLimitExceeded):
        used.reserve("T2", CENT, Decimal("500.00"), "EUR")


def test_a_window_reloaded_from_the_store_equals_the_one_in_memory() -> None:
    events = store()
    used = window()
    used.reserve("T1", Decimal("700.00"), LIMIT, "EUR")
    used.reserve("T2", Decimal("0.01"), LIMIT, "EUR")
    used.release("T1")
    events.save(used)
    assert events.repository.get(used.id).__dict__ == used.__dict__


def test_period_keys_are_the_utc_day_and_month() -> None:
    at = datetime(2026, 1, 5, 23, 59, tzinfo=UTC)
    assert period_key("daily", at) == "2026-01-05"
    assert period_key("monthly", at) == "2026-01"


def test_window_ids_differ_per_customer_direction_and_period() -> None:
    ids = {
        LimitWindow.create_id("partner-a", "CUST1", "buy", "2026-11-21"),
        LimitWindow.create_id("partner-a", "CUST2", "buy", "2026-11-21"),
        LimitWindow.create_id("partner-a", "CUST1", "sell", "2026-11-21"),
        LimitWindow.create_id("partner-a", "CUST1", "buy", "2026-11-22"),
        LimitWindow.create_id("partner-a", "CUST1", "buy", "2026-11"),
    }
    assert len(ids) == 5


cents = st.integers(1, 60_000).map(lambda units: Decimal(units) * CENT)
steps = st.lists(
    st.tuples(st.sampled_from(("reserve", "release")), st.sampled_from("ABCDEFGH"), cents),
    max_size=30,
)


@settings(max_examples=150, deadline=None)
@given(steps=steps, limit=cents)
def test_a_window_refuses_exactly_when_used_plus_amount_would_pass_the_limit(
    steps: list[tuple[str, str, Decimal]], limit: Decimal
) -> None:
    used = window()
    model: dict[str, Decimal] = {}
    for action, code, amount in steps:
        if action == "release":
            used.release(code)
            model.pop(code, None)
        elif code in model:
            assert_nothing_recorded(used, lambda c=code, a=amount: used.reserve(c, a, limit, "EUR"))
        elif sum(model.values()) + amount > limit:
            assert_refused(
                used,
                TrustLevelLimitExceeded,
                lambda c=code, a=amount: used.reserve(c, a, limit, "EUR"),
            )
        else:
            used.reserve(code, amount, limit, "EUR")
            model[code] = amount
        assert used.reservations == model
        assert used.used == sum(model.values())
        assert used.used <= limit
        assert used.remaining(limit) == limit - used.used
