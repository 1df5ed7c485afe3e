"""`GET /reconciliation?from=&to=`: the caller's partner's reconciliation of a period, for its operator and
auditors.

The period's bounds are read as every instant of the API (`interface/shared/instants.py`): RFC 3339 with an
offset within the years 1 to 9999 in UTC, on the ledger's time base (an event's `at`), 400
`malformed_request` otherwise; the period is (`from`, `to`], so the opening is the books as of `from` and
the closing as of `to`. Like the reserves, the read first waits (at most 2 s) for the postings to hold the
partner's last write, else 503 `read_model_behind`; the chain reports are read from the postings' own
`read.chain_reports`, at the position the postings were read at (`projections.reconciliation`), never from
the log. A period is at most MOST_DAYS (366) days, 422 `period_too_long` beyond; the reports and the
differences are paged (`page`, `pageSize`), with their totals. A heavy read: at most a few of a partner's run
at once (`interface/http/heavy_reads.py`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Annotated

from litestar import Controller, Request, get
from litestar.di import NamedDependency, Provide
from litestar.params import QueryParameter

from application.settings import Settings
from interface.http.dependencies import SettingsDep, principal
from interface.http.documented import version_header
from interface.http.heavy_reads import HEAVY_READ
from interface.http.problems import ApiProblem
from interface.http.read_your_writes import ReadPools, WritePositions
from interface.http.security import AUDITOR, OPERATOR, authorize, roles
from interface.reconciliation import shapes as s
from interface.shared.query_parameters import moment_of
from interface.shared.reserve_reading import reconciliation_of, shown_amount
from projections.reconciliation import (
    ChainReport,
    Period,
    Reconciliation,
    Window,
)

WAIT_SECONDS = 2.0
MOST_DAYS = 366  # the longest period, as the console's
MAX_PAGE_SIZE = 1000
MAX_PAGE = 1_000_000


def bound(name: str, description: str) -> QueryParameter:
    return QueryParameter(name=name, required=True, format="date-time", description=description)


def period_of(start: str, end: str) -> Period:
    """The period (`from`, `to`] of the query, its bounds read as every instant of the API (`moment_of`)."""
    at_start, at_end = moment_of("from", start), moment_of("to", end)
    assert at_start is not None and at_end is not None  # both are required
    return period_between(at_start, at_end)


def period_between(start: datetime, end: datetime) -> Period:
    """The period (`start`, `end`]; an `end` not after `start` is the empty period at `end` (the books as of
    then, no reports), as an empty range of a list is no error. The command line's as the API's."""
    return Period(min(start, end), end)


def bounded(period: Period) -> Period:
    """The period, if it is at most MOST_DAYS days long; else 422 `period_too_long` (both bounds are
    well-formed: a value the API document's schema accepts is never a 400)."""
    if period.end - period.start > timedelta(days=MOST_DAYS):
        days = (period.end - period.start) / timedelta(days=1)
        raise ApiProblem(
            422,
            "period_too_long",
            f"a period is at most {MOST_DAYS} days; from {period.start.isoformat()} to "
            f"{period.end.isoformat()} is {days:.6g} days: choose a shorter one",
        )
    return period


@dataclass(frozen=True)
class ReconciliationReader:
    settings: Settings
    pools: ReadPools  # the heavy reads', never the API's pool; the read servers' first when set
    written: WritePositions
    wait_seconds: float = WAIT_SECONDS

    @classmethod
    def of(
        cls,
        settings: SettingsDep,
        heavy_pools: NamedDependency[ReadPools],
        write_positions: NamedDependency[WritePositions],
    ) -> ReconciliationReader:
        """On what the app hands the routes (a dependency): its settings, the heavy reads' pools and the
        partners' write positions."""
        return cls(settings, heavy_pools, write_positions)

    def reconcile(self, partner: str, period: Period, window: Window) -> Reconciliation:
        """Once the postings hold the partner's last write: its reserves, reports (in `window`) and
        differences of the period, in one transaction of the postings' view (a read server's when it has
        that write in time, else the primary's)."""
        return reconciliation_of(self.pools, self.written, partner, period, window, self.wait_seconds)


def reconciliation_body(settings: Settings, done: Reconciliation, window: Window) -> s.Reconciliation:
    """The body of a reconciliation whose reports were read in `window`: the differences in the same
    window, and both totals."""

    def shown(code: str, amount: Decimal) -> Decimal:
        return shown_amount(settings, code, amount)

    size = window.limit or 1
    differences = done.differences[window.offset : window.offset + size]
    most = max(done.report_total, len(done.differences))
    return s.Reconciliation(
        from_=done.period.start.astimezone(UTC),
        to=done.period.end.astimezone(UTC),
        clean=done.clean,
        page=window.offset // size + 1,
        page_size=size,
        total_pages=math.ceil(most / size),
        reports_total=done.report_total,
        differences_total=len(done.differences),
        reserves=[
            s.ReserveRollForward(
                name=r.name,
                code=r.code,
                opening=shown(r.code, r.opening),
                postings=shown(r.code, r.postings),
                closing=shown(r.code, r.closing),
                balanced=r.balanced,
            )
            for r in done.reserves
        ],
        reports=[report_body(report) for report in done.reports],
        differences=[
            s.Difference(
                kind=d.kind,  # type: ignore[arg-type]
                report=d.report,  # type: ignore[arg-type]
                transaction_code=d.transaction_code,
                tx_id=d.tx_id,
                at=d.at.astimezone(UTC),
                detail=d.detail,
            )
            for d in differences
        ],
    )


def report_body(report: ChainReport) -> s.ChainReport:
    return s.ChainReport(
        report=report.report,  # type: ignore[arg-type]
        transaction_code=report.transaction_code,
        tx_id=report.tx_id,
        crypto_amount=report.amount,
        confirmations=report.confirmations,
        event=report.event,
        at=report.at.astimezone(UTC),
        posted=report.posted,
    )


class ReconciliationController(Controller):
    path = "/reconciliation"
    tags = ["Reconciliation"]
    guards = [authorize]
    opt = roles(OPERATOR, AUDITOR)
    parameters = version_header()
    dependencies = {"reader": Provide(ReconciliationReader.of, sync_to_thread=False)}

    @get(
        "/",
        operation_id="getReconciliation",
        sync_to_thread=True,  # a heavy read: in a worker thread, holding one of the partner's slots
        opt={HEAVY_READ: True},
    )
    def reconciliation(
        self,
        request: Request,
        reader: NamedDependency[ReconciliationReader],
        start: Annotated[str, bound("from", "the period's start (excluded): the books as of then")],
        end: Annotated[str, bound("to", "the period's end (included): the books as of then")],
        page: Annotated[int, QueryParameter(ge=1, le=MAX_PAGE, description="page number, from 1")] = 1,
        page_size: Annotated[
            int,
            QueryParameter(
                name="pageSize", ge=1, le=MAX_PAGE_SIZE, description="reports and differences a page"
            ),
        ] = 100,
    ) -> s.Reconciliation:
        """The partner's reserves rolled over the period (at most 366 days; opening + postings = closing, per
        reserve and asset, from the ledger postings), the chain reports of the period matched to their
        transactions and postings, and the differences by kind, both paged (`page`, `pageSize`) with their
        totals; `clean` when there is no difference at all."""
        period = bounded(period_of(start, end))
        window = Window(offset=(page - 1) * page_size, limit=page_size)
        done = reader.reconcile(principal(request).partner, period, window)
        return reconciliation_body(reader.settings, done, window)
