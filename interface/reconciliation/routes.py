"""`GET /reconciliation?from=&to=`: the caller's partner's reconciliation of a period, for its operator and
auditors.

The period's bounds follow the history's `asOf` (`interface/transactions/lookups.py`): RFC 3339 with an
offset, on the ledger's time base (an event's `at`), 400 `malformed_request` otherwise; the period is
(`from`, `to`], so the opening is the books as of `from` and the closing as of `to`. Like the reserves, the
read first waits (at most 2 s) for the postings to hold the partner's last write, else 503
`read_model_behind`; the chain reports are read from the log up to the position the postings were read at.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC
from decimal import Decimal
from typing import Annotated, Any

from litestar import Controller, Request, get
from litestar.datastructures import State
from litestar.di import NamedDependency, Provide
from litestar.params import QueryParameter
from psycopg_pool import ConnectionPool

from application.settings import Settings
from domain.money import WIDE
from interface.http.common import principal, version_header
from interface.http.read_your_writes import WritePositions
from interface.http.security import AUDITOR, OPERATOR, authorize, roles
from interface.reconciliation import shapes as s
from interface.reserves.reading import hold_partners_postings
from interface.transactions.lookups import moment_of
from projections.reconciliation import (
    ChainReport,
    Period,
    Reconciliation,
    chain_events,
    read_posted,
    read_reserves,
    reconcile,
)
from projections.reserve_positions import read_position

WAIT_SECONDS = 2.0


def bound(name: str, description: str) -> QueryParameter:
    return QueryParameter(name=name, required=True, format="date-time", description=description)


def period_of(start: str, end: str) -> Period:
    """The period (`from`, `to`] of the query, by the history's `asOf` rules; a `to` not after `from` is the
    empty period at `to` (the books as of then, no reports), as an empty range of a list is no error."""
    at_start, at_end = moment_of("from", start), moment_of("to", end)
    assert at_start is not None and at_end is not None  # both are required
    return Period(min(at_start, at_end), at_end)


@dataclass(frozen=True)
class ReconciliationReader:
    settings: Settings
    pool: ConnectionPool
    written: WritePositions
    ledger: Any  # the ledger, whose recorder and mapper read the log
    wait_seconds: float = WAIT_SECONDS

    @classmethod
    def of(cls, state: State) -> ReconciliationReader:
        return cls(state.settings, state.pool, state.write_positions, state.runtime.ledger)

    def reconcile(self, partner: str, period: Period) -> Reconciliation:
        """Once the postings hold the partner's last write: its reserves and reports of the period."""
        with self.pool.connection() as conn:
            hold_partners_postings(conn, self.written, partner, self.wait_seconds, "the reconciliation")
            with conn.transaction():  # the position first: the postings read then hold at least its events
                position = read_position(conn)
                reserves = read_reserves(conn, partner, period).get(partner, [])
                posted = read_posted(conn, partner, period)
        events = chain_events(self.ledger.recorder, self.ledger.mapper, position)
        return reconcile(partner, period, events, reserves, posted)


def reconciliation_body(settings: Settings, done: Reconciliation) -> s.Reconciliation:
    def shown(code: str, amount: Decimal) -> Decimal:
        return at_scale(settings, code, amount)

    return s.Reconciliation(
        from_=done.period.start.astimezone(UTC),
        to=done.period.end.astimezone(UTC),
        clean=done.clean,
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
            for d in done.differences
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


def at_scale(settings: Settings, code: str, amount: Decimal) -> Decimal:
    """An amount at its asset's places (as recorded for an asset no longer configured)."""
    if code in settings.cryptos:
        return amount.quantize(settings.crypto_asset(code).quantum, context=WIDE)
    if code in settings.currencies:
        return amount.quantize(settings.fiat(code).quantum, context=WIDE)
    return amount


class ReconciliationController(Controller):
    path = "/reconciliation"
    tags = ["Reconciliation"]
    guards = [authorize]
    opt = roles(OPERATOR, AUDITOR)
    parameters = version_header()
    dependencies = {"reader": Provide(ReconciliationReader.of, sync_to_thread=False)}

    @get("/", operation_id="getReconciliation", sync_to_thread=True)
    def reconciliation(
        self,
        request: Request,
        reader: NamedDependency[ReconciliationReader],
        start: Annotated[str, bound("from", "the period's start (excluded): the books as of then")],
        end: Annotated[str, bound("to", "the period's end (included): the books as of then")],
    ) -> s.Reconciliation:
        """The partner's reserves rolled over the period (opening + postings = closing, per reserve and
        asset, from the ledger postings), every chain report of the period matched to its transaction and
        posting, and the differences by kind; `clean` when there are none."""
        period = period_of(start, end)
        return reconciliation_body(reader.settings, reader.reconcile(principal(request).partner, period))
