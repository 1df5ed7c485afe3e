"""The one settable clock of the tests and the benchmarks: it stands still until its user sets or advances
it, so that a history made with it (prices dated, limit windows, expiries) is the same on every run.

It lives under bench/ because the benchmarks need it too and import nothing from tests/; the tests import
it from here."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

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
