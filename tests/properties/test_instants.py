"""Property tests of the one reading of instants and days (`interface.shared.instants`, issue 35): instants
over the whole calendar with every offset, and texts built of right and wrong parts, against a model of the
documented forms. A value is accepted exactly when its form is documented and its UTC time is within the
years 1 to 9999; an accepted one reads back as itself; nothing but `Unreadable` is ever raised (never an
OverflowError, so never a 500); and what the console and the limits compute from what was read (a period's
days and their ends, a limit window's day and month) never overflows either."""

from __future__ import annotations

import calendar
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta, timezone

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from domain.limits import PERIODS, period_key
from interface.console.periods import end_of, period_of, start_of
from interface.http.problems import ApiProblem
from interface.shared import instants

FAST = settings(max_examples=400, deadline=None)
MICROSECONDS = 86_400 * 10**6
# the microseconds from 0001-01-01T00:00:00 to 9999-12-31T23:59:59.999999, both included
LAST_MICROSECOND = date.max.toordinal() * MICROSECONDS - 1
MOST_OFFSET = 23 * 60 + 59  # minutes


def microseconds(local: datetime) -> int:
    """A wall time (its offset left aside) as microseconds since 0001-01-01T00:00:00, computed without
    datetime arithmetic."""
    seconds = local.hour * 3600 + local.minute * 60 + local.second
    return (local.toordinal() - 1) * MICROSECONDS + seconds * 10**6 + local.microsecond


def written_offset(minutes: int) -> str:
    sign = "-" if minutes < 0 else "+"
    return f"{sign}{abs(minutes) // 60:02d}:{abs(minutes) % 60:02d}"


def written_local(local: datetime, separator: str = "T") -> str:
    """`YYYY-MM-DDTHH:MM:SS` for every year, 1 included (strftime's %Y gives "1" there)."""
    return (
        f"{local.year:04d}-{local.month:02d}-{local.day:02d}{separator}"
        f"{local.hour:02d}:{local.minute:02d}:{local.second:02d}"
    )


# wall times over the whole calendar, the first and last days often (naive: the offset is put on after)
local_times = st.one_of(
    st.datetimes(),
    st.datetimes(max_value=datetime(1, 1, 2)),  # noqa: DTZ001 - a wall time, its offset put on later
    st.datetimes(min_value=datetime(9999, 12, 30)),  # noqa: DTZ001
)
offsets = st.one_of(st.integers(-MOST_OFFSET, MOST_OFFSET), st.sampled_from([0, -60, 60, -MOST_OFFSET]))


@FAST
@given(local=local_times, offset=offsets, places=st.integers(0, 6), zulu=st.sampled_from(["Z", "z", None]))
def test_an_instant_is_accepted_exactly_when_its_utc_time_is_within_the_years_1_to_9999(
    local: datetime, offset: int, places: int, zulu: str | None
) -> None:
    fraction = f".{local.microsecond:06d}"[: places + 1] if places else ""
    suffix = zulu if zulu is not None and offset == 0 else written_offset(offset)
    text = written_local(local) + fraction + suffix
    meant = local.replace(microsecond=int(fraction[1:].ljust(6, "0")) if fraction else 0)
    utc = microseconds(meant) - offset * 60 * 10**6
    if not 0 <= utc <= LAST_MICROSECOND:
        with pytest.raises(instants.Unreadable) as refused:
            instants.instant("asOf", text)
        assert str(refused.value).startswith(f"asOf {text!r} must be an RFC 3339 date-time")
        assert "0001 to 9999" in refused.value.expected
        return
    read = instants.instant("asOf", text)
    assert read == meant.replace(tzinfo=timezone(timedelta(minutes=offset)))
    assert read.utcoffset() == timedelta(minutes=offset)
    assert instants.instant("asOf", read.isoformat()) == read  # with its offset
    again = instants.instant("asOf", instants.written(read))  # in UTC
    assert again == read and again.utcoffset() == timedelta(0)
    for period in PERIODS:  # a limit window's key, as `asOf` on the limits computes it
        assert period_key(period, read.astimezone(UTC))


@dataclass(frozen=True)
class Parts:
    """A text made of the parts of an RFC 3339 date-time, each possibly wrong."""

    year: int
    month: int
    day: int
    hour: int
    minute: int
    second: int | None  # None: left out
    fraction: str | None  # None: no fraction; else the digits after the dot (none: a lone dot)
    separator: str
    offset: str

    @property
    def text(self) -> str:
        seconds = "" if self.second is None else f":{self.second:02d}"
        fraction = "" if self.fraction is None else f".{self.fraction}"
        return (
            f"{self.year:04d}-{self.month:02d}-{self.day:02d}{self.separator}{self.hour:02d}:{self.minute:02d}"
            f"{seconds}{fraction}{self.offset}"
        )

    def offset_minutes(self) -> int | None:
        """The offset in minutes when it is of a documented form, else None."""
        if self.offset in ("Z", "z"):
            return 0
        if len(self.offset) != 6 or self.offset[0] not in "+-" or self.offset[3] != ":":
            return None
        hours, minutes = int(self.offset[1:3]), int(self.offset[4:6])
        if hours > 23 or minutes > 59:
            return None
        return (hours * 60 + minutes) * (-1 if self.offset[0] == "-" else 1)

    def accepted(self) -> datetime | None:
        """The instant the documented forms give this text, None when they give none."""
        offset = self.offset_minutes()
        if (
            offset is None
            or self.separator not in ("T", "t")
            or self.second is None
            or (self.fraction is not None and not 1 <= len(self.fraction) <= 6)
            or not 1 <= self.year <= 9999
            or not 1 <= self.month <= 12
            or not 1 <= self.day <= calendar.monthrange(self.year, self.month)[1]
            or self.hour > 23
            or self.minute > 59
            or self.second > 59
        ):
            return None
        micro = int(self.fraction.ljust(6, "0")) if self.fraction is not None else 0
        local = datetime(self.year, self.month, self.day, self.hour, self.minute, self.second, micro, UTC)
        if not 0 <= microseconds(local) - offset * 60 * 10**6 <= LAST_MICROSECOND:
            return None
        return local.replace(tzinfo=timezone(timedelta(minutes=offset)))


offset_texts = st.one_of(
    st.sampled_from(["Z", "z", "", "+0100", "+01", "UTC", " Z", "+24:00", "-00:60"]),
    st.builds(
        lambda h, m, s: f"{s}{h:02d}:{m:02d}", st.integers(0, 25), st.integers(0, 61), st.sampled_from("+-")
    ),
)
parts = st.builds(
    Parts,
    year=st.one_of(st.integers(0, 9999), st.sampled_from([0, 1, 9999])),
    month=st.integers(0, 13),
    day=st.integers(0, 32),
    hour=st.integers(0, 24),
    minute=st.integers(0, 60),
    second=st.one_of(st.none(), st.integers(0, 60)),
    fraction=st.one_of(st.none(), st.text(alphabet="0123456789", max_size=8)),
    separator=st.sampled_from(["T", "t", " ", "_"]),
    offset=offset_texts,
)


@FAST
@given(parts)
def test_only_the_documented_form_of_an_instant_is_accepted(parts: Parts) -> None:
    expected = parts.accepted()
    if expected is None:
        with pytest.raises(instants.Unreadable):
            instants.instant("from", parts.text)
    else:
        read = instants.instant("from", parts.text)
        assert read == expected and read.utcoffset() == expected.utcoffset()


@FAST
@given(st.text())
def test_any_text_is_an_instant_or_unreadable_never_an_error_of_another_kind(text: str) -> None:
    for read in (instants.instant, instants.day, instants.typed_instant):
        try:
            read("to", text)
        except instants.Unreadable as refused:
            assert refused.name == "to" and refused.value == text


@pytest.mark.parametrize(
    "text",
    ["20260101", "2026-W01-1", "2026-001", "2026-01-01T10:00:00", "2026-01-01 10:00:00Z", "2026-01-01"],
)
def test_the_forms_python_would_take_but_the_docs_do_not_are_refused_as_instants(text: str) -> None:
    with pytest.raises(instants.Unreadable):
        instants.instant("from", text)


@pytest.mark.parametrize("text", ["20260101", "2026-W01-1", "2026-001", "2026-01-01T00:00", "0000-01-01"])
def test_the_forms_python_would_take_but_the_docs_do_not_are_refused_as_days(text: str) -> None:
    with pytest.raises(instants.Unreadable):
        instants.day("from", text)


@FAST
@given(st.dates())
def test_every_day_reads_back_as_itself_and_a_last_day_has_an_end(day: date) -> None:
    assert instants.day("from", day.isoformat()) == day
    if day == date.max:
        with pytest.raises(instants.Unreadable, match="to 9999-12-30"):
            instants.day("to", day.isoformat(), instants.LAST_WHOLE_DAY)
    else:
        assert end_of(instants.day("to", day.isoformat(), instants.LAST_WHOLE_DAY)) > start_of(day)


@FAST
@given(local=local_times, seconds=st.booleans())
def test_a_typed_instant_is_read_as_utc(local: datetime, seconds: bool) -> None:
    text = written_local(local)[: None if seconds else -3]
    read = instants.typed_instant("at", text)
    assert read == local.replace(microsecond=0, second=local.second if seconds else 0, tzinfo=UTC)


days_or_none = st.one_of(st.none(), st.dates())


@FAST
@given(first=days_or_none, last=days_or_none, today=st.dates())
def test_a_console_period_is_days_whose_ends_exist_or_a_400_never_an_overflow(
    first: date | None, last: date | None, today: date
) -> None:
    try:
        period = period_of(first and first.isoformat(), last and last.isoformat(), today)
    except ApiProblem as refused:
        assert refused.status_code == 400
        return
    assert period.first <= period.last and len(period.days) <= 366
    assert start_of(period.first) < end_of(period.last)  # what the charts and the search read
