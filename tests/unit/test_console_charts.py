"""The geometry of the console's day charts (`interface.console.charts`): a point per day, in order, the axis
spanning zero and every value, each point's tooltip its day and exact amount; every axis label its tick's
value with its sign and every digit, in a label area wide enough for it, over negative, mixed and huge
ranges; a chart of zeros said in words."""

from __future__ import annotations

from datetime import date, timedelta
from decimal import Decimal

from hypothesis import given
from hypothesis import strategies as st

from interface.console.charts import (
    CHARACTER,
    HEIGHT,
    LABEL_GAP,
    LEFT,
    TOP,
    WIDTH,
    day_chart,
    tick_values,
    written,
)

FIRST = date(2026, 3, 1)
amounts = st.decimals(min_value=-(10**9), max_value=10**9, places=8, allow_nan=False, allow_infinity=False)


def days_of(values: list[Decimal]) -> list[tuple[date, Decimal]]:
    return [(FIRST + timedelta(days=index), value) for index, value in enumerate(values)]


@given(st.lists(amounts, min_size=1, max_size=40))
def test_every_day_has_one_point_inside_the_plot_left_to_right(values: list[Decimal]) -> None:
    chart = day_chart(days_of(values), "BTC")
    assert [point.day for point in chart.points] == [day for day, _ in days_of(values)]
    assert len(chart.bars) == len(values) and len(chart.line.split()) == len(values)
    xs = [point.x for point in chart.points]
    assert xs == sorted(xs) and xs[0] >= chart.left >= LEFT and xs[-1] <= chart.right_edge < chart.width
    assert all(TOP <= point.y <= chart.bottom_edge for point in chart.points)


@given(st.lists(amounts, min_size=1, max_size=40))
def test_the_highest_value_is_drawn_highest_and_zero_lies_on_the_baseline(values: list[Decimal]) -> None:
    chart = day_chart(days_of(values), "EUR")
    highest = chart.points[values.index(max(values))]
    assert highest.y == min(point.y for point in chart.points)
    assert chart.low <= 0 <= chart.high
    assert all(point.y == chart.baseline for point in chart.points if point.value == 0)


def test_a_points_tooltip_is_its_day_and_amount_as_written() -> None:
    chart = day_chart(days_of([Decimal("0E-8"), Decimal("1.50000000")]), "BTC")
    assert [point.label for point in chart.points] == [
        "2026-03-01: 0.00000000 BTC",
        "2026-03-02: 1.50000000 BTC",
    ]
    assert chart.height == HEIGHT


huge = st.decimals(min_value=-(10**29), max_value=10**29, places=18, allow_nan=False, allow_infinity=False)
negative = st.decimals(max_value=Decimal("-1E-18"), min_value=-(10**29), places=18, allow_nan=False)
ranges = st.one_of(
    st.lists(negative, min_size=1, max_size=20),  # every value below zero
    st.lists(huge, min_size=1, max_size=20),  # mixed, up to 30 digits before the point and 18 after
    st.lists(amounts, min_size=1, max_size=20),
)


@given(ranges, st.sampled_from([None, 0, 2, 8, 18]))
def test_every_axis_label_reads_back_as_its_ticks_value_with_its_sign(
    values: list[Decimal], places: int | None
) -> None:
    chart = day_chart(days_of(values), "BTC", places)
    assert chart.ticks[0].value == chart.high and chart.ticks[-1].value == chart.low
    for tick in chart.ticks:
        assert Decimal(tick.label) == tick.value, (tick.label, tick.value)
        assert tick.label.startswith("-") == (tick.value < 0), tick.label
        assert "E" not in tick.label.upper()
        digits = tick.label.lstrip("-").split(".")
        assert len(digits) == 1 or len(digits[1]) >= chart.places


@given(ranges, st.sampled_from([None, 2, 18]))
def test_the_longest_label_fits_left_of_the_axis(values: list[Decimal], places: int | None) -> None:
    chart = day_chart(days_of(values), "ETH", places)
    longest = max(len(tick.label) for tick in chart.ticks)
    assert chart.left - LABEL_GAP >= CHARACTER * longest, (chart.left, longest)
    assert chart.width >= WIDTH and chart.right_edge > chart.left


@given(st.lists(amounts, min_size=1, max_size=20))
def test_every_point_and_label_of_a_chart_is_at_one_scale(values: list[Decimal]) -> None:
    chart = day_chart(days_of([Decimal(0), *values]), "BTC", 8)
    scales = {-point.value.as_tuple().exponent for point in chart.points}
    assert scales == {8}
    assert all(tick.label.partition(".")[2].__len__() == 8 for tick in chart.ticks)


def test_a_negative_balance_keeps_its_sign_and_leading_digits() -> None:
    chart = day_chart(days_of([Decimal(0), Decimal("-12345678.000000000000000001")]), "ETH", 18)
    assert [tick.label for tick in chart.ticks] == ["0.000000000000000000", "-12345678.000000000000000001"]
    assert chart.left >= CHARACTER * len("-12345678.000000000000000001")


def test_tick_values_are_the_ends_and_zero_between_them() -> None:
    assert tick_values(Decimal(-5), Decimal(3)) == [Decimal(3), Decimal(0), Decimal(-5)]
    assert tick_values(Decimal(-5), Decimal(0)) == [Decimal(0), Decimal(-5)]
    assert written(Decimal("-0E-8"), 8) == "0.00000000"
    assert written(Decimal("1.234"), 2) == "1.234"  # more places than the scale: whole, never rounded


def test_a_chart_of_zeros_only_is_all_zero_and_one_with_a_value_is_not() -> None:
    assert day_chart(days_of([Decimal(0), Decimal("0E-8")]), "BTC").all_zero
    assert not day_chart(days_of([Decimal(0), Decimal("-0.00000001")]), "BTC").all_zero
