"""What the console's pages show, read as the API reads it and always of the signed-in partner: transactions
from the read models (after the partner's writes), the payout queue (`interface.console.queue`), a
transaction's history from the event store with its
callbacks and postings, reserves now and per day from the postings, volumes per day from
`read.daily_volumes`, a period's reconciliation (`interface.console.reconciling`), every transaction of a
search for its file, and the projections' positions with the audit chain's head and the last `audit verify`
(and whether the log has moved past it). Amounts are shown at their asset's places."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import date, datetime
from decimal import Decimal
from typing import Any

import msgspec
from litestar.di import NamedDependency
from psycopg_pool import ConnectionPool

from application.history import History, Step, happened_at, steps_of
from application.ledger import Ledger
from application.settings import Settings
from application.store.aggregates import rebuilt
from domain.errors import TransactionNotFound
from interface.console.charts import Chart, day_chart
from interface.console.periods import Days
from interface.console.queue import Section, payout_queue
from interface.console.reconciling import PeriodReconciliation, reconcile
from interface.http.heavy_reads import HeavyReads
from interface.shared import transaction_presenters as presenters
from interface.shared import transaction_shapes as r
from interface.shared.reserve_reading import ReserveReader, shown_amount
from interface.shared.transaction_reading import Reader
from projections import status
from projections.audit_verifications import ChainHead, Verification, chain_head_of, last_verification
from projections.callbacks.outbox import DeliveryRecord, DeliveryStore
from projections.queries import TransactionFilter

PAGE_SIZE = 25
FILE_PAGE = 500  # the page a search's file is read in
EVENT_DATA = msgspec.json.Encoder(decimal_format="number")


@dataclass(frozen=True)
class Found:
    """A page of a search: the transactions on it, how many match, and the page's number."""

    transactions: list[r.Transaction]
    total: int
    page: int
    page_size: int = PAGE_SIZE

    @property
    def more(self) -> bool:
        return self.page * self.page_size < self.total


def who(actor: Any) -> str:
    """An event's actor (`application.store.actors`) in words: a client with its roles and request id, a
    component of the service, or a process's user and command."""
    if actor.get("kind") == "http":
        return f"{actor.get('client')} ({actor.get('roles')}), request {actor.get('request')}"
    if actor.get("kind") == "service":
        return f"the service's {actor.get('component')}"
    return f"{actor.get('user')} running {actor.get('command')}"


@dataclass(frozen=True)
class Timeline:
    """A transaction as it stood at `at` (now when None): its events up to then with their status changes,
    its callbacks and postings up to then; `transaction` None when it did not exist yet then."""

    code: str
    at: datetime | None
    transaction: r.Transaction | None
    steps: list[Step]
    event_data: dict[int, str]  # by version: the event's fields as the history shows them, as JSON
    actors: dict[int, str]  # by version: who caused the event, in words (none for one before actors were)
    deliveries: list[DeliveryRecord]
    postings: list[dict[str, Any]]
    every_step: list[Step]  # the whole history, for the picker's links

    def happened(self, step: Step) -> datetime:
        return happened_at(step.event)


@dataclass(frozen=True)
class DayChart:
    """One chart of the console: what it is of (`subject`, e.g. asset and reserve) and its geometry."""

    subject: dict[str, str]
    chart: Chart


@dataclass(frozen=True)
class System:
    projections: list[status.ProjectionState]
    head: int
    chain_head: ChainHead | None
    verification: Verification | None
    stalled_after: float = field(default=30.0)
    head_at: datetime | None = None  # when the event at the log's head was recorded

    @property
    def verify_behind(self) -> bool:
        """Whether the log has events recorded after the last `audit verify` finished (which it did not
        prove); False before any verify (the page says it never ran)."""
        return (
            self.verification is not None and self.head_at is not None and self.head_at > self.verification.at
        )


@dataclass(frozen=True)
class ReserveNow:
    """A reserve's position in one asset now: its total, what open transactions locked, what is available."""

    name: str
    code: str
    total: Decimal
    locked: Decimal
    available: Decimal


@dataclass(frozen=True)
class ConsoleReader:
    settings: Settings
    reader: Reader
    history: History
    reserves: ReserveReader
    deliveries: DeliveryStore
    heavy: HeavyReads  # the charts and timelines are heavy reads: at most a few of a partner's at once
    ledger: Ledger  # the system page: the log's head
    pool: ConnectionPool  # the API's: the projections' positions, the audit chain's head
    projection_names: tuple[str, ...]
    stall_seconds: float

    @classmethod
    def of(
        cls,
        settings: NamedDependency[Settings],
        reader: NamedDependency[Reader],
        history: NamedDependency[History],
        reserve_reader: NamedDependency[ReserveReader],
        deliveries: NamedDependency[DeliveryStore],
        heavy_reads: NamedDependency[HeavyReads],
        ledger: NamedDependency[Ledger],
        api_pool: NamedDependency[ConnectionPool],
        projection_names: NamedDependency[tuple[str, ...]],
        stall_seconds: NamedDependency[float],
    ) -> ConsoleReader:
        """On what the app hands the routes (a dependency of every page)."""
        return cls(
            settings,
            reader,
            history,
            reserve_reader,
            deliveries,
            heavy_reads,
            ledger,
            api_pool,
            projection_names,
            stall_seconds,
        )

    def search(self, partner: str, code: str | None, where: TransactionFilter, page: int) -> Found:
        """The partner's transactions matching `where` (newest first), or the one of `code`."""
        if code:
            try:
                return Found([self.reader.transaction(partner, code).transaction], 1, 1)
            except TransactionNotFound:
                return Found([], 0, 1)
        total, rows = self.reader.transactions(partner, where, page, PAGE_SIZE)
        return Found([presenters.transaction_row(self.settings, row) for row in rows], total, page)

    def payout_queue(self, partner: str) -> list[Section]:
        """The partner's sells waiting for its operator, by what they wait for (`interface.console.queue`)."""
        return payout_queue(self.reader, self.settings, partner)

    def timeline(self, partner: str, code: str, at: datetime | None) -> Timeline:
        """TransactionNotFound for an unknown code, and for another partner's (a heavy read)."""
        with self.heavy.slot(partner):
            return self._timeline(partner, code, at)

    def _timeline(self, partner: str, code: str, at: datetime | None) -> Timeline:

        def then(moment: datetime) -> bool:
            """Whether what happened at `moment` had happened by the instant shown."""
            return at is None or moment <= at

        every_step = steps_of(self.history.history(partner, code))
        steps = [step for step in every_step if then(happened_at(step.event))]
        events = [step.event for step in steps]
        transaction, shown = None, []
        if steps:
            as_of = rebuilt(events)  # the events read once: the transaction as they left it
            transaction = presenters.transaction(self.settings, as_of).transaction
            shown = presenters.history(self.settings, as_of, events, at).events
        return Timeline(
            code=code,
            at=at,
            transaction=transaction,
            steps=steps,
            event_data={event.version: _json(event.data) for event in shown},
            actors={event.version: who(event.actor) for event in shown if event.actor},
            deliveries=[
                replace(delivery, attempts=[attempt for attempt in delivery.attempts if then(attempt.at)])
                for delivery in self.deliveries.deliveries(partner, code)
                if then(delivery.created)
            ],
            postings=[
                self._scaled_posting(posting)
                for posting in self.reserves.transaction_postings(partner, code)
                if then(posting["at"])
            ],
            every_step=every_step,
        )

    def reserve_charts(self, partner: str, period: Days) -> list[DayChart]:
        """One chart per asset and reserve: its total at the end of each day of the period (0 on the days
        before the reserve was named; a heavy read)."""
        series: dict[tuple[str, str], dict[date, Decimal]] = {}
        with self.heavy.slot(partner):
            by_day = self.reserves.positions_by_day(partner, period.first, period.last)
        for day, positions in by_day:
            for position in positions:
                amount = shown_amount(self.settings, position.code, position.total)
                series.setdefault((position.code, position.name), {})[day] = amount
        return _day_charts(series, period, ("asset", "reserve"))

    def volume_charts(self, partner: str, period: Days) -> list[DayChart]:
        """One chart per currency and payment method with any volume in the period: its fiat volume each
        day (0 on a day without any; a heavy read)."""
        series: dict[tuple[str, str], dict[date, Decimal]] = {}
        with self.heavy.slot(partner):
            volumes = self.reader.daily_volumes(partner, period.first, period.last)
        for volume in volumes:
            amount = shown_amount(self.settings, volume.currency_code, volume.fiat_value)
            series.setdefault((volume.currency_code, volume.payment_method_code), {})[volume.day] = amount
        return _day_charts(series, period, ("currency", "payment-method"))

    def system(self) -> System:
        """Where each projection is against the event log, the audit chain's head, the last verify."""
        ledger = self.ledger
        with self.pool.connection() as conn:
            head = ledger.head()
            found = status.states(conn, self.projection_names, head, status.event_time(ledger))
            chain_head = chain_head_of(conn)
            verification = last_verification(conn)
        head_at = status.event_time(ledger)(head - 1) if head > 0 else None
        return System(found, head, chain_head, verification, self.stall_seconds, head_at)

    def _scaled_posting(self, posting: dict[str, Any]) -> dict[str, Any]:
        """A posting with its debit and credit at its asset's places."""
        code = posting["currency_code"]
        scaled = {side: posting[side] for side in ("debit", "credit")}
        for side, amount in scaled.items():
            scaled[side] = None if amount is None else shown_amount(self.settings, code, amount)
        return {**posting, **scaled}

    def reserves_now(self, partner: str) -> list[ReserveNow]:
        """The partner's reserves now (as `GET /reserves`): total, locked and available, at each asset's
        places."""
        return [
            ReserveNow(
                position.name,
                position.code,
                *(
                    shown_amount(self.settings, position.code, amount)
                    for amount in (position.total, position.locked, position.available)
                ),
            )
            for position in self.reserves.positions(partner)
        ]

    def reconciliation(self, partner: str, days: Days, reports_shown: int | None) -> PeriodReconciliation:
        """The partner's reconciliation of `days` (`interface.console.reconciling`; a heavy read)."""
        with self.heavy.slot(partner):
            return reconcile(self.settings, self.reserves, partner, days, reports_shown)

    def every_transaction(self, partner: str, where: TransactionFilter, most: int) -> list[r.Transaction]:
        """The partner's transactions matching `where`, newest first, at most `most` (a search's file; a
        heavy read)."""
        found: list[r.Transaction] = []
        with self.heavy.slot(partner):
            for page in range(1, most // FILE_PAGE + 2):
                total, rows = self.reader.transactions(partner, where, page, FILE_PAGE)
                found += [presenters.transaction_row(self.settings, row) for row in rows]
                if not rows or len(found) >= min(total, most):
                    break
        return found[:most]


def _day_charts(
    series: dict[tuple[str, str], dict[date, Decimal]], period: Days, names: tuple[str, str]
) -> list[DayChart]:
    """A chart per key of `series` (its amounts by day; the key's first part is their unit, `names` name its
    parts), with a point for each day of the period, 0 on a day without an amount."""
    return [
        DayChart(
            dict(zip(names, key, strict=True)),
            day_chart([(day, by_day.get(day, Decimal(0))) for day in period.days], key[0]),
        )
        for key, by_day in sorted(series.items())
    ]


def _json(data: dict[str, Any]) -> str:
    """An event's fields as the history endpoint writes them, indented for reading."""
    return msgspec.json.format(EVENT_DATA.encode(data), indent=2).decode()
