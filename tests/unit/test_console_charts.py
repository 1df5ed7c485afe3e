"""The geometry of the console's day charts (`interface.console.charts`): a point per day, in order, the axis
spanning zero and every value, each point's tooltip its day and exact amount."""

from __future__ import annotations

from datetime import date, timedelta
from decimal import Decimal

from hypothesis import given
from hypothesis import strategies as st

from interface.console.charts import HEIGHT, LEFT, TOP, WIDTH, day_chart

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
    assert xs == sorted(xs) and xs[0] >= LEFT and xs[-1] <= WIDTH
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
