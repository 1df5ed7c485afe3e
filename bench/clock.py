"""The one settable clock of the tests and the benchmarks: it stands still until its user sets or advances
it, so that a history made with it (prices dated, limit windows, expiries) is the same on every run.

It lives under bench/ because the benchmarks need it too and import nothing from tests/; the tests import
it from here."""

from __future__ import annotations

from datetime import UTC, datetime, time, timedelta

START = datetime(2026, 3, 10, 12, 0, tzinfo=UTC)


class FakeClock:
    """A `Clock` (application/ports.py) whose time is `at`, UTC-aware, moved only by its user."""

    def __init__(self, at: datetime = START) -> None:
        self.at = at

    def now(self) -> datetime:
        return self.at

    def set(self, at: datetime) -> None:
        if at.tzinfo is None:
            raise ValueError("the clock keeps UTC-aware times only")
        self.at = at.astimezone(UTC)

    def advance(self, seconds: float = 0, **delta: float) -> datetime:
        """Moves the clock on by `seconds` and any `timedelta` keywords (minutes=5); the new time."""
        self.at += timedelta(seconds=seconds, **delta)
        return self.at


class MiddayClock:
    """A `Clock` that runs as the real one does, but from midday (UTC) of the day it was made: the tests that
    share one app for minutes (tests/e2e) make their histories on the real date, never across a midnight,
    whatever the time of day they run (a buy and the limits read after it are always of one day)."""

    def __init__(self) -> None:
        started = datetime.now(UTC)
        self.shift = datetime.combine(started.date(), time(12), UTC) - started

    def now(self) -> datetime:
        return datetime.now(UTC) + self.shift
