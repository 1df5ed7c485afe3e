"""Charts of one figure per UTC day, drawn as SVG on the server: the geometry here, the markup in the
template `_chart.html`. Coordinates are computed in Decimal like every amount, and written to a tenth of a
pixel; each point carries its day and amount as its tooltip (an SVG `<title>`), so a chart needs no script to
be read.

Every amount of a chart (its points, its figures and its axis labels) is written at one scale, the asset's
places (given, or else the most places among its values), positionally, with its sign and every digit: a
label is never cut short, as the space left of the axis is sized to the longest label. A chart whose every
value is zero has nothing to draw: `Chart.all_zero` says so and the page says it in words."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import date
from decimal import Decimal

from domain.money import WIDE

WIDTH = 640
HEIGHT = 200
LEFT, RIGHT, TOP, BOTTOM = 96, 12, 12, 28
PIXEL = Decimal("0.1")
CHARACTER = 7  # the widest a character of a tick label (11px, tabular digits) is drawn, in pixels
LABEL_GAP = 6  # between a label's end and the axis
LABEL_MARGIN = 8  # between the chart's left edge and the longest label
LABEL_HEIGHT = 12  # the least distance between two labels' baselines
LEAST_PLOT = 320  # the plot keeps at least this width, however long the labels (the chart widens)


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
class Tick:
    """A mark of the value axis: its value, the text written beside it, and its height."""

    value: Decimal
    label: str
    y: Decimal


@dataclass(frozen=True)
class Chart:
    """A day-by-day chart: its points (a line through them) or bars, its axis ticks and baseline."""

    unit: str
    points: list[Point]
    bars: list[Bar]
    line: str  # the polyline's `points` attribute
    high: Decimal
    low: Decimal
    baseline: Decimal  # the y of zero
    bar_width: Decimal
    ticks: list[Tick]
    places: int
    width: int = WIDTH
    height: int = HEIGHT
    left: int = LEFT
    right_edge: int = WIDTH - RIGHT
    top: int = TOP
    bottom_edge: int = HEIGHT - BOTTOM

    @property
    def all_zero(self) -> bool:
        """Whether every value is zero (nothing to draw: the page says so in words)."""
        return all(point.value == 0 for point in self.points)


def places_of(values: list[Decimal]) -> int:
    """The most decimal places among `values` (0 for none): the scale they are all written at when no asset
    gives one."""
    return max([0, *(-int(value.as_tuple().exponent) for value in values if value.is_finite())])


def written(value: Decimal, places: int) -> str:
    """`value` positionally (never an exponent) at `places` decimals, with its sign and every digit; a value
    with more places than that is written whole, never rounded; zero has no sign."""
    scaled = value.quantize(Decimal(1).scaleb(-places), context=WIDE) if _fits(value, places) else value
    text = format(scaled, "f")
    return text[1:] if text.startswith("-") and scaled == 0 else text


def _fits(value: Decimal, places: int) -> bool:
    return -int(value.as_tuple().exponent) <= places


def tick_values(low: Decimal, high: Decimal) -> list[Decimal]:
    """The values the axis is marked at: its ends and zero (between them), each once, high first."""
    return sorted({high, Decimal(0), low}, reverse=True)


def ticks_of(low: Decimal, high: Decimal, places: int, y_of: Callable[[Decimal], Decimal]) -> list[Tick]:
    """The axis's ticks from `high` down to `low`, each labelled at `places` (see `written`); zero's left out
    when it lies too close to an end for its label to be read."""
    ends = {y_of(low), y_of(high)}
    return [
        Tick(value, written(value, places), y_of(value))
        for value in tick_values(low, high)
        if value in (low, high) or all(abs(y_of(value) - end) >= LABEL_HEIGHT for end in ends)
    ]


def label_area(labels: list[str]) -> int:
    """The width left of the axis that the longest of `labels` fits into, never less than LEFT."""
    longest = max([0, *(len(label) for label in labels)])
    return max(LEFT, LABEL_MARGIN + CHARACTER * longest + LABEL_GAP)


def day_chart(values: list[tuple[date, Decimal]], unit: str, places: int | None = None) -> Chart:
    """The chart of `values` (one per day, in order) in `unit`, written at `places` (by default the most
    places among the values), with the axis spanning zero and every value."""
    scale = places_of([value for _, value in values]) if places is None else places
    low = min([Decimal(0), *(value for _, value in values)])
    high = max([Decimal(0), *(value for _, value in values)])
    labels = [written(value, scale) for value in tick_values(low, high)]
    left = label_area(labels)
    width = max(WIDTH, left + LEAST_PLOT + RIGHT)
    span = (high - low) or Decimal(1)
    plot_width = Decimal(width - left - RIGHT)
    plot_height = Decimal(HEIGHT - TOP - BOTTOM)
    slot = plot_width / max(len(values), 1)

    def y_of(value: Decimal) -> Decimal:
        return _pixel(TOP + (high - value) / span * plot_height)

    points = []
    for index, (day, value) in enumerate(values):
        x = _pixel(left + slot * index + slot / 2)
        shown = Decimal(written(value, scale))
        points.append(Point(day, shown, x, y_of(value), f"{day.isoformat()}: {written(value, scale)} {unit}"))
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
        ticks=ticks_of(low, high, scale, y_of),
        places=scale,
        width=width,
        left=left,
        right_edge=width - RIGHT,
    )


def _pixel(value: Decimal) -> Decimal:
    return value.quantize(PIXEL)
