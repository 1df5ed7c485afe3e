"""What a person types into the console's forms, text fields whatever the browser's locale: days
(`YYYY-MM-DD`, a UTC day) and instants (`YYYY-MM-DDTHH:MM:SSZ` as the console shows them, or without the `Z`
read as UTC, or an RFC 3339 time with an offset, as the history's links give them), read by the one
reading of instants and days (`interface.shared.instants`). Anything else,
and a day whose end the ledger cannot count with (9999-12-31 as a period's last day), is refused with a
message saying what to type."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from typing import TypeVar

from interface.http.problems import ApiProblem
from interface.shared import instants

T = TypeVar("T")
DEFAULT_DAYS = 30
MOST_DAYS = 366


@dataclass(frozen=True)
class Days:
    """The UTC days from `first` to `last`, both included."""

    first: date
    last: date

    @property
    def days(self) -> list[date]:
        return [self.first + timedelta(days=offset) for offset in range((self.last - self.first).days + 1)]


def start_of(day: date) -> datetime:
    """The first instant of a UTC day."""
    return datetime.combine(day, time.min, UTC)


def end_of(day: date) -> datetime:
    """The first instant after a UTC day (the next day's start); the day is at most LAST_WHOLE_DAY, as
    `last_day_of` reads it."""
    return start_of(day + timedelta(days=1))


def day_of(name: str, value: str | None) -> date | None:
    """A day typed into the field `name` (None when left empty): the first day of a period."""
    return _read(name, value, lambda text: instants.day(name, text))


def last_day_of(name: str, value: str | None) -> date | None:
    """The last day of a period typed into the field `name` (None when left empty): a day whose end the
    ledger can count with, so at most 9999-12-30."""
    return _read(name, value, lambda text: instants.day(name, text, instants.LAST_WHOLE_DAY))


def period_of(first: str | None, last: str | None, today: date) -> Days:
    """The period of the fields `from` and `to`: by default the DEFAULT_DAYS days up to today (or up to
    `to`; from 0001-01-01 at the earliest), at most MOST_DAYS days, never ending before it begins."""
    end = last_day_of("to", last) or min(today, instants.LAST_WHOLE_DAY)
    start = day_of("from", first) or end - timedelta(days=min(DEFAULT_DAYS - 1, (end - date.min).days))
    if start > end:
        raise ApiProblem(400, "malformed_request", f"from ({start}) must not be after to ({end})")
    if (end - start).days >= MOST_DAYS:
        raise ApiProblem(
            400, "malformed_request", f"a period is at most {MOST_DAYS} days; choose a shorter one"
        )
    return Days(start, end)


def instant_of(value: str | None) -> datetime | None:
    """The instant of the field `at`: `2026-11-27T10:30:00Z`, or without the `Z` (to the minute or second) in
    UTC, or an RFC 3339 time with an offset; None when left empty."""
    return _read("at", value, lambda text: instants.typed_instant("at", text))


def _read(name: str, value: str | None, read: Callable[[str], T]) -> T | None:
    if value is None or not value.strip():
        return None
    try:
        return read(value.strip())
    except instants.Unreadable as error:
        raise ApiProblem(400, "malformed_request", f"{name} must be {error.expected}") from None
