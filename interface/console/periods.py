"""What a person types into the console's forms: days (an HTML date field, `YYYY-MM-DD`, a UTC day) and
instants (an HTML datetime-local field, read as UTC, or an RFC 3339 time with an offset, as the history's
links give them). Anything else is refused with a message saying what to type."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta

from interface.http.problems import ApiProblem
from interface.transactions.lookups import moment_of

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


def day_of(name: str, value: str | None) -> date | None:
    """A day typed into the field `name` (None when left empty)."""
    if value is None or not value.strip():
        return None
    try:
        return date.fromisoformat(value.strip())
    except ValueError:
        raise ApiProblem(400, "malformed_request", f"{name} must be a day such as 2026-11-27") from None


def period_of(first: str | None, last: str | None, today: date) -> Days:
    """The period of the fields `from` and `to`: by default the DEFAULT_DAYS days up to today (or up to
    `to`), at most MOST_DAYS days, never ending before it begins."""
    end = day_of("to", last) or today
    start = day_of("from", first) or end - timedelta(days=DEFAULT_DAYS - 1)
    if start > end:
        raise ApiProblem(400, "malformed_request", f"from ({start}) must not be after to ({end})")
    if (end - start).days >= MOST_DAYS:
        raise ApiProblem(
            400, "malformed_request", f"a period is at most {MOST_DAYS} days; choose a shorter one"
        )
    return Days(start, end)


def instant_of(value: str | None) -> datetime | None:
    """The instant of the field `at`: a datetime-local value (`2026-11-27T10:30` or with seconds) in UTC, or
    an RFC 3339 time with an offset; None when left empty."""
    if value is None or not value.strip():
        return None
    text = value.strip()
    try:
        naive = datetime.fromisoformat(text)
    except ValueError:
        naive = None
    if naive is not None and naive.tzinfo is None and len(text) <= len("2026-11-27T10:30:00"):
        return naive.replace(tzinfo=UTC)
    return moment_of("at", text)
