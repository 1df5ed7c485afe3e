"""Charts of one figure per UTC day, drawn as SVG on the server: the geometry here, the markup in the
template `_chart.html`. Coordinates are computed in Decimal like every amount, and written to a tenth of a
pixel; each point carries its day and amount as its tooltip (an SVG `<title>`), so a chart needs no script to
be read."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date
from decimal import Decimal

WIDTH = 640
HEIGHT = 200
LEFT, RIGHT, TOP, BOTTOM = 96, 12, 12, 28
PIXEL = Decimal("0.1")


@dataclass(frozen=True)
class Point:
    day: date
    value: Decimal
    x: Decimal
    y: Decimal
    label: str  # the tooltip: the day and the amount with its unit


@dataclass(frozen=True)
class Bar:
    point: Point
    top: Decimal
    height: Decimal


@dataclass(frozen=True)
class Chart:
    """A day-by-day chart: its points (a line through them) or bars, its axis labels and baseline."""

    unit: str
    points: list[Point]
    bars: list[Bar]
    line: str  # the polyline's `points` attribute
    high: Decimal
    low: Decimal
    baseline: Decimal  # the y of zero
    bar_width: Decimal
    width: int = WIDTH
    height: int = HEIGHT
    left: int = LEFT
    right_edge: int = WIDTH - RIGHT
    top: int = TOP
    bottom_edge: int = HEIGHT - BOTTOM


def day_chart(values: list[tuple[date, Decimal]], unit: str) -> Chart:
    """The chart of `values` (one per day, in order), with the axis spanning zero and every value."""
    low = min([Decimal(0), *(value for _, value in values)])
    high = max([Decimal(0), *(value for _, value in values)])
    span = (high - low) or Decimal(1)
    plot_width = Decimal(WIDTH - LEFT - RIGHT)
    plot_height = Decimal(HEIGHT - TOP - BOTTOM)
    count = len(values)
    slot = plot_width / max(count, 1)

    def y_of(value: Decimal) -> Decimal:
        return _pixel(TOP + (high - value) / span * plot_height)

    points = [
        Point(
            day,
            value,
            _pixel(LEFT + slot * index + slot / 2),
            y_of(value),
            f"{day.isoformat()}: {value:f} {unit}",
        )
        for index, (day, value) in enumerate(values)
    ]
    baseline = y_of(Decimal(0))
    bars = [Bar(point, min(point.y, baseline), abs(baseline - point.y) or Decimal(1)) for point in points]
    return Chart(
        unit=unit,
        points=points,
        bars=bars,
        line=" ".join(f"{point.x},{point.y}" for point in points),
        high=high,
        low=low,
        baseline=baseline,
        bar_width=_pixel(slot * Decimal("0.7")),
    )


def _pixel(value: Decimal) -> Decimal:
    return value.quantize(PIXEL)
