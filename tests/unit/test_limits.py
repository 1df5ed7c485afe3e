"""Trust-level limit windows: reserve within the limit, release gives back; each event carries the window's
total, so the window can be built from its latest event alone; windows recorded before events carried it
still replay to the same total."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from domain.errors import TrustLevelLimitExceeded
from domain.limits import LimitWindow, period_key
from tests.unit.builders import Store, assert_refused, store

LIMIT = Decimal("1000.00")
CENT = Decimal("0.01")
IDENTITY = {
    "partner": "partner-a",
    "customer_code": "CUST1",
    "direction": "buy",
    "period": "daily",
    "key": "2026-11-21",
}


def window() -> LimitWindow:
    return LimitWindow(**IDENTITY)


def built_from_latest_event(used: LimitWindow) -> LimitWindow | None:
    return LimitWindow.as_left_by(used.pending_events[-1], **IDENTITY)


def without_created_on(aggregate: LimitWindow) -> dict[str, Any]:
    return {k: v for k, v in aggregate.__dict__.items() if k not in ("_created_on", "_pending_events")}


def in_format_before_totals(events: list[Any]) -> list[Any]:
    """`events` of a window in the shape they were stored in before events carried the total: `Reserved`
    without `used`, `Released` with its transaction code only."""
    for domain_event in events:
        if isinstance(domain_event, (LimitWindow.Reserved, LimitWindow.Released)):
            del domain_event.__dict__["used"]
        if isinstance(domain_event, LimitWindow.Released):
            del domain_event.__dict__["amount"]
    return events


def recorded_before_totals(used: LimitWindow) -> list[Any]:
    return in_format_before_totals(used.collect_events())


def stored_before_totals(events: Store, used: LimitWindow) -> None:
    old = recorded_before_totals(used)
    events.recorder.insert_events([events.mapper.to_stored_event(e) for e in old])


def test_a_new_window_has_used_nothing() -> None:
    fresh = window()
    assert fresh.used == 0
    assert fresh.remaining(LIMIT) == LIMIT


def test_a_reservation_within_the_limit_is_counted_and_its_event_carries_the_total() -> None:
    used = window()
    used.reserve("T1", Decimal("400.00"), LIMIT, "EUR")
    used.reserve("T2", Decimal("100.50"), LIMIT, "EUR")
    assert used.used == Decimal("500.50")
    assert used.remaining(LIMIT) == Decimal("499.50")
    reserved = used.pending_events[-1]
    assert (reserved.transaction_code, reserved.amount, reserved.used) == ("T2", Decimal("100.50"), used.used)


def test_a_window_keeps_no_list_of_its_orders() -> None:
    used = window()
    for n in range(50):
        used.reserve(f"T{n}", Decimal("1.00"), LIMIT, "EUR")
    assert set(used.__dict__) == set(window().__dict__)


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


def test_release_gives_back_what_the_transaction_reserved_and_its_event_carries_the_total() -> None:
    used = window()
    used.reserve("T1", Decimal("700.00"), LIMIT, "EUR")
    used.reserve("T2", Decimal("300.00"), LIMIT, "EUR")
    used.release("T1", Decimal("700.00"))
    released = used.pending_events[-1]
    assert (released.transaction_code, released.amount, released.used) == ("T1", Decimal("700.00"), used.used)
    assert used.used == Decimal("300.00")
    used.reserve("T3", Decimal("700.00"), LIMIT, "EUR")
    assert used.used == LIMIT


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
    used.release("T1", Decimal("700.00"))
    events.save(used)
    assert events.repository.get(used.id).__dict__ == used.__dict__


def test_a_window_built_from_its_latest_event_equals_the_replayed_one_but_for_its_creation_time() -> None:
    used = window()
    used.reserve("T1", Decimal("700.00"), LIMIT, "EUR")
    used.reserve("T2", Decimal("0.01"), LIMIT, "EUR")
    built = built_from_latest_event(used)
    used.release("T1", Decimal("700.00"))
    released = built_from_latest_event(used)
    assert built is not None and released is not None
    assert (built.version, built.used, built.modified_on) == (
        3,
        Decimal("700.01"),
        used.pending_events[2].timestamp,
    )
    assert built.created_on is None
    assert without_created_on(released) == without_created_on(used)


def test_a_window_built_from_its_opened_event_is_the_new_window() -> None:
    fresh = window()
    built = built_from_latest_event(fresh)
    assert built is not None
    assert without_created_on(built) == without_created_on(fresh)
    assert built.created_on == fresh.created_on


def test_a_window_built_from_its_latest_event_reserves_on_from_that_version() -> None:
    used = window()
    used.reserve("T1", Decimal("900.00"), LIMIT, "EUR")
    built = built_from_latest_event(used)
    assert built is not None
    with pytest.raises(TrustLevelLimitExceeded):
        built.reserve("T2", Decimal("100.01"), LIMIT, "EUR")
    built.reserve("T2", Decimal("100.00"), LIMIT, "EUR")
    assert [(e.originator_version, e.used) for e in built.pending_events] == [(3, LIMIT)]


def test_an_event_recorded_before_events_carried_the_total_cannot_build_the_window() -> None:
    used = window()
    used.reserve("T1", Decimal("700.00"), LIMIT, "EUR")
    old_reserved = recorded_before_totals(used)[-1]
    assert LimitWindow.as_left_by(old_reserved, **IDENTITY) is None


def test_a_window_recorded_before_events_carried_the_total_replays_to_the_same_total() -> None:
    events = store()
    used = window()
    used.reserve("T1", Decimal("700.00"), LIMIT, "EUR")
    used.reserve("T2", Decimal("200.00"), LIMIT, "EUR")
    used.release("T1", Decimal("700.00"))
    used.reserve("T3", Decimal("50.00"), LIMIT, "EUR")
    stored_before_totals(events, used)
    replayed = events.repository.get(used.id)
    assert (replayed.version, replayed.used) == (5, Decimal("250.00"))
    assert replayed.reservations == {"T2": Decimal("200.00"), "T3": Decimal("50.00")}
    replayed.release("T2", Decimal("200.00"))
    assert replayed.used == Decimal("50.00")
    assert "reservations" not in replayed.__dict__
    built = built_from_latest_event(replayed)
    assert built is not None and without_created_on(built) == without_created_on(replayed)
    events.save(replayed)
    assert events.repository.get(used.id).__dict__ == replayed.__dict__


def test_period_keys_are_the_utc_day_and_month() -> None:
    at = datetime(2026, 1, 5, 23, 59, tzinfo=UTC)
    assert period_key("daily", at) == "2026-01-05"
    assert period_key("monthly", at) == "2026-01"


@given(st.datetimes(min_value=datetime(1000, 1, 1), timezones=st.just(UTC)))  # noqa: DTZ001 (naive bounds)
def test_period_keys_are_the_keys_strftime_wrote_for_every_instant(at: datetime) -> None:
    # windows stored before keys were built from the ISO date keep their ids: the same keys, every instant
    assert period_key("daily", at) == at.strftime("%Y-%m-%d")
    assert period_key("monthly", at) == at.strftime("%Y-%m")


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
steps = st.lists(st.tuples(st.sampled_from(("reserve", "release")), cents), max_size=30)


@settings(max_examples=150, deadline=None)
@given(steps=steps, limit=cents)
def test_a_window_refuses_exactly_when_used_plus_amount_would_pass_the_limit(
    steps: list[tuple[str, Decimal]], limit: Decimal
) -> None:
    """Each transaction reserves once and is released at most once (its own create and cancel see to it);
    the window built from its latest event always has the replayed window's total."""
    used = window()
    held: dict[str, Decimal] = {}
    for n, (action, amount) in enumerate(steps):
        if action == "release" and held:
            code = sorted(held)[n % len(held)]
            used.release(code, held.pop(code))
        elif action == "reserve" and sum(held.values()) + amount > limit:
            assert_refused(
                used,
                TrustLevelLimitExceeded,
                lambda c=f"T{n}", a=amount: used.reserve(c, a, limit, "EUR"),
            )
        elif action == "reserve":
            used.reserve(f"T{n}", amount, limit, "EUR")
            held[f"T{n}"] = amount
        assert used.used == sum(held.values())
        assert used.used <= limit
        assert used.remaining(limit) == limit - used.used
        built = built_from_latest_event(used)
        assert built is not None and (built.version, built.used) == (used.version, used.used)
