"""The console's reconciliation of a period of UTC days: what `GET /reconciliation` answers for the same
period, read the same way (`projections.reconciliation`, on the postings' view once it holds the partner's
last write): each reserve rolled forward (opening + postings = closing), how many chain reports the period
has with the first of them, and every difference; amounts at their asset's places.

A period of days from `first` to `last` is the API's period (`from`, `to`] from the start of `first` to
the end of `last` (both UTC): the opening is the books as they stood when `first` began."""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal

from application.settings import Settings
from interface.console.periods import Days, end_of, start_of
from interface.shared.reserve_reading import ReserveReader, reconciliation_of, shown_amount
from projections.reconciliation import (
    ChainReport,
    Difference,
    Period,
    ReserveRollForward,
    Window,
)

REPORTS_SHOWN = 100  # the first reports of the period on the page (the API pages through all of them)


@dataclass(frozen=True)
class RollForward:
    """A reserve's opening, postings and closing in one asset, at its places; balanced when opening +
    postings = closing (and the closing is the balance the ledger keeps)."""

    name: str
    code: str
    opening: Decimal
    postings: Decimal
    closing: Decimal
    balanced: bool


@dataclass(frozen=True)
class PeriodReconciliation:
    """A period's reconciliation as the console shows it (and writes it to CSV)."""

    days: Days
    period: Period
    reserves: list[RollForward]
    reports: list[ChainReport]  # the first REPORTS_SHOWN (every one for a file: `reports_shown` None)
    report_total: int
    differences: list[Difference]  # every one

    @property
    def clean(self) -> bool:
        return not self.differences


def period_of_days(days: Days) -> Period:
    """The API's period (`from`, `to`] of the days: from the start of the first to the end of the last."""
    return Period(start_of(days.first), end_of(days.last))


def reconcile(
    settings: Settings,
    reserves: ReserveReader,
    partner: str,
    days: Days,
    reports_shown: int | None = REPORTS_SHOWN,
) -> PeriodReconciliation:
    """The partner's reconciliation of `days`, once the postings hold its last write (503 otherwise, as the
    API's), on the heavy reads' connections; `reports_shown` of its reports (None: every one)."""
    period = period_of_days(days)
    pools = reserves.heavy_pools or reserves.pools
    window = Window(limit=reports_shown)
    done = reconciliation_of(pools, reserves.written, partner, period, window, reserves.wait_seconds)
    return PeriodReconciliation(
        days=days,
        period=period,
        reserves=[scaled(settings, reserve) for reserve in done.reserves],
        reports=done.reports,  # as reported (a report names no asset of its own)
        report_total=done.report_total,
        differences=done.differences,
    )


def scaled(settings: Settings, rolled: ReserveRollForward) -> RollForward:
    """A reserve's roll-forward with its amounts at its asset's places (balanced as read)."""

    def shown(amount: Decimal) -> Decimal:
        return shown_amount(settings, rolled.code, amount)

    return RollForward(
        rolled.name,
        rolled.code,
        shown(rolled.opening),
        shown(rolled.postings),
        shown(rolled.closing),
        rolled.balanced,
    )
