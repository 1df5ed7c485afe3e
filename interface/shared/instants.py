"""The one reading of an instant or a day that a client, a person at the console or an operator at the command
line gives the ledger: the API's `asOf`, `from` and `to`, the console's `at`, `from` and `to`, the command
line's `--from` and `--to`. Each edge says a refusal in its own words (a 400 problem, a console page, exit 2)
from the `Unreadable` raised here, which names the parameter and the form to type.

The forms, and nothing else:

- an instant: RFC 3339 with an offset, `YYYY-MM-DDTHH:MM:SS`, an optional fraction of up to 6 digits, then
  `Z` or `+HH:MM` / `-HH:MM` (`T` and `Z` in either case);
- a day: `YYYY-MM-DD`, a UTC day;
- the console's typed instant: an HTML datetime-local value, `YYYY-MM-DDTHH:MM` or `YYYY-MM-DDTHH:MM:SS`,
  read as UTC.

The ledger counts in UTC, from 0001-01-01T00:00:00Z to 9999-12-31T23:59:59.999999Z: an instant whose UTC time
leaves those years is refused, as is a day whose use would leave them (the day after the last day of a
period that ends at the end of that day). Nothing that reads a value here overflows later.
"""

from __future__ import annotations

import re
from datetime import UTC, date, datetime, timedelta

from domain.errors import quoted_text

_DIGITS = r"[0-9]{4}-[0-9]{2}-[0-9]{2}"
INSTANT_FORM = re.compile(
    _DIGITS + r"[Tt][0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]{1,6})?([Zz]|[+-]([01][0-9]|2[0-3]):[0-5][0-9])",
    re.ASCII,
)
DAY_FORM = re.compile(_DIGITS, re.ASCII)
LOCAL_FORM = re.compile(_DIGITS + r"T[0-9]{2}:[0-9]{2}(:[0-9]{2})?", re.ASCII)

FIRST_DAY = date.min  # 0001-01-01
LAST_DAY = date.max  # 9999-12-31
# the last day whose end (the next day's start) the ledger can still count with
LAST_WHOLE_DAY = LAST_DAY - timedelta(days=1)

AN_INSTANT = (
    "an RFC 3339 date-time with an offset (YYYY-MM-DDTHH:MM:SS, an optional fraction of up to 6 digits, "
    "then Z, +HH:MM or -HH:MM) within the years 0001 to 9999 in UTC, e.g. 2026-03-10T12:00:00Z"
)
A_LOCAL_INSTANT = (
    "a UTC time YYYY-MM-DDTHH:MM or YYYY-MM-DDTHH:MM:SS, e.g. 2026-11-27T10:30, or " + AN_INSTANT
)


def a_day(latest: date = LAST_DAY) -> str:
    return f"a day YYYY-MM-DD from {FIRST_DAY.isoformat()} to {latest.isoformat()}, e.g. 2026-11-27"


class Unreadable(ValueError):
    """A value not in the form its parameter takes, or outside the instants the ledger counts with: says which
    parameter, the value (quoted, shortened) and what to type."""

    def __init__(self, name: str, value: str, expected: str) -> None:
        self.name, self.value, self.expected = name, value, expected
        super().__init__(f"{name} {quoted_text(value)} must be {expected}")


def instant(name: str, value: str) -> datetime:
    """The instant of an RFC 3339 date-time with an offset (with that offset), whose UTC time is within the
    years 1 to 9999; `Unreadable` otherwise."""
    if not INSTANT_FORM.fullmatch(value):
        raise Unreadable(name, value, AN_INSTANT)
    try:
        moment = datetime.fromisoformat(value.upper().replace("Z", "+00:00"))
        moment.astimezone(UTC)  # OverflowError for a UTC time outside years 1..9999
    except (ValueError, OverflowError):
        raise Unreadable(name, value, AN_INSTANT) from None
    return moment


def day(name: str, value: str, latest: date = LAST_DAY) -> date:
    """The day of `YYYY-MM-DD`, from 0001-01-01 to `latest`; `Unreadable` otherwise."""
    if not DAY_FORM.fullmatch(value):
        raise Unreadable(name, value, a_day(latest))
    try:
        read = date.fromisoformat(value)
    except ValueError:
        raise Unreadable(name, value, a_day(latest)) from None
    if read > latest:
        raise Unreadable(name, value, a_day(latest))
    return read


def typed_instant(name: str, value: str) -> datetime:
    """The console's typed instant: a datetime-local value read as UTC, or an RFC 3339 date-time with an
    offset (the links of a timeline give those); `Unreadable` otherwise."""
    if LOCAL_FORM.fullmatch(value):
        try:
            return datetime.fromisoformat(value).replace(tzinfo=UTC)
        except ValueError:
            raise Unreadable(name, value, A_LOCAL_INSTANT) from None
    try:
        return instant(name, value)
    except Unreadable:
        raise Unreadable(name, value, A_LOCAL_INSTANT) from None


def written(moment: datetime) -> str:
    """An instant as RFC 3339 text, in UTC (`Z`): what `instant` reads back as the same instant."""
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")
