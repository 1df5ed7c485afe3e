"""The reconciliation of a partner's period: its reserves rolled forward, and every chain report of the period
matched to its transaction and its posting, with the differences an auditor must look into.

The period is (start, end], on the history's time base (an event's `at`, when the ledger decided it): the
opening is the books as they stood at `start` (what `asOf=start` shows), the closing as they stood at `end`.

- Reserves: per reserve (`reserve:<name>`) and asset, from the partner's rows of `read.postings`: the
  opening (postings up to `start`), the period's postings and the closing (postings up to `end`), summed
  apart; opening + postings = closing must hold, and when nothing was posted to the reserve after `end`
  the closing must also equal the balance `read.balances` keeps (kept by `projections.ledger_postings`).
- Chain reports, from the log: the events a deposit or sendout report recorded on a transaction (Confirming,
  ToPayout, Completed, Blocked, PaidLate, SendoutSeen), each with the posting it made, and the reports that
  changed no transaction (`domain.chain_reports.DisputedReport`).
- Differences, by kind: `reported_not_expected` (a payment to no sell's address, a sendout of no waiting
  buy, a payment to an expired sell), `expected_not_reported` (a buy committed by `end` whose sendout no
  report showed by then), `amount_mismatch` (a payment of another amount than quoted, a transfer reported
  again with another amount), `confirmation_mismatch` (a transfer reported again with fewer confirmations),
  `reported_twice` (a second transfer for one transaction, or one transfer for two), `not_posted` (a report
  whose posting the ledger's postings lack), `reserve_unbalanced`.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import Any
from uuid import UUID

import psycopg
from eventsourcing.utils import get_topic
from psycopg.rows import dict_row
from psycopg.sql import SQL, Identifier

from application.store.database import eventsourcing_env
from application.store.log import EVENTS_SCHEMA, LedgerLog
from domain.chain_reports import Dispute, DisputedReport
from domain.transaction import Transaction, TransactionType
from projections.audit_sql import small_pool, snapshot, table_exists
from projections.postgres import READ_SCHEMA
from projections.posting_rules import RESERVE_PREFIX
from projections.reserve_positions import read_position

T = Transaction
OPENED = (T.Staged, T.Initiated)
REPORTED = (T.SendoutSeen, T.Confirming, T.ToPayout, T.Completed, T.Blocked, T.PaidLate)
POSTING = (T.ToPayout, T.Completed, T.Blocked, T.PaidLate)  # every one posts (a first Confirming too)
TOPICS = [get_topic(cls) for cls in (*OPENED, T.Committed, *REPORTED, DisputedReport.Recorded)]
PAGE = 5000
DISPUTE_KINDS = {
    Dispute.ADDRESS_UNKNOWN: "reported_not_expected",
    Dispute.TRANSACTION_UNKNOWN: "reported_not_expected",
    Dispute.NOT_EXPECTED: "reported_not_expected",
    Dispute.ANOTHER_TRANSFER: "reported_twice",
    Dispute.ANOTHER_AMOUNT: "amount_mismatch",
    Dispute.FEWER_CONFIRMATIONS: "confirmation_mismatch",
}


@dataclass(frozen=True)
class Period:
    start: datetime
    end: datetime

    def holds(self, at: datetime) -> bool:
        return self.start < at <= self.end


@dataclass(frozen=True)
class ReserveRollForward:
    name: str
    code: str
    opening: Decimal
    postings: Decimal
    closing: Decimal
    kept: Decimal | None  # the balance read.balances keeps, when nothing was posted after the period

    @property
    def balanced(self) -> bool:
        return self.opening + self.postings == self.closing and self.kept in (None, self.closing)


@dataclass(frozen=True)
class ChainReport:
    """A report the ledger recorded on a transaction: what it said, what it did, and whether it posted."""

    report: str  # deposit | sendout
    transaction_code: str
    tx_id: str
    amount: Decimal | None
    confirmations: int
    event: str
    at: datetime
    posted: bool | None  # None: this event posts nothing


@dataclass(frozen=True)
class Difference:
    kind: str
    report: str
    tx_id: str
    at: datetime
    detail: str
    transaction_code: str | None = None


@dataclass
class Reconciliation:
    partner: str
    period: Period
    reserves: list[ReserveRollForward] = field(default_factory=list)
    reports: list[ChainReport] = field(default_factory=list)
    differences: list[Difference] = field(default_factory=list)

    @property
    def clean(self) -> bool:
        return not self.differences


def happened_at(event: Any) -> datetime:
    """An event's time on the history's time base: its `at`, else the store's timestamp."""
    return getattr(event, "at", event.timestamp)


def chain_events(recorder: Any, mapper: Any, stop: int) -> Iterator[tuple[int, Any]]:
    """(notification id, event) of every event a reconciliation reads, in the log's order, up to `stop`
    (the position the postings were read at, so that no report is judged unposted for being newer)."""
    start = 1
    while start <= stop:
        page = recorder.select_notifications(start, PAGE, stop=stop, topics=TOPICS)
        for notification in page:
            yield notification.id, mapper.to_domain_event(notification)
        if len(page) < PAGE:
            return
        start = page[-1].id + 1


RESERVES_SQL = """SELECT p.partner, p.account, p.currency_code,
    coalesce(sum(p.debit - p.credit) FILTER (WHERE p.at <= %(start)s), 0) AS opening,
    coalesce(sum(p.debit - p.credit) FILTER (WHERE p.at > %(start)s AND p.at <= %(end)s), 0) AS postings,
    coalesce(sum(p.debit - p.credit) FILTER (WHERE p.at <= %(end)s), 0) AS closing,
    max(p.at) AS latest, min(p.at) AS first, b.balance AS kept
  FROM {postings} p LEFT JOIN {balances} b
    ON b.partner = p.partner AND b.account = p.account AND b.currency_code = p.currency_code
  WHERE p.account LIKE %(reserves)s AND (%(partner)s::text IS NULL OR p.partner = %(partner)s)
  GROUP BY p.partner, p.account, p.currency_code, b.balance
  ORDER BY p.partner, p.currency_code, p.account"""
POSTED_SQL = """SELECT DISTINCT notification_id FROM {postings}
  WHERE at > %(start)s AND at <= %(end)s AND transaction_code IS NOT NULL
    AND (%(partner)s::text IS NULL OR partner = %(partner)s)"""


def read_reserves(
    conn: psycopg.Connection[Any], partner: str | None, period: Period, schema: str = READ_SCHEMA
) -> dict[str, list[ReserveRollForward]]:
    """Each partner's reserves rolled over the period (one partner's with `partner`), from the postings."""
    if not table_exists(conn, schema, "postings"):
        return {}
    tables = {"postings": Identifier(schema, "postings"), "balances": Identifier(schema, "balances")}
    bounds = {"start": period.start, "end": period.end, "partner": partner}
    statement = SQL(RESERVES_SQL).format(**tables)
    rows = conn.cursor(row_factory=dict_row).execute(statement, {**bounds, "reserves": RESERVE_PREFIX + "%"})
    found: dict[str, list[ReserveRollForward]] = {}
    for row in rows.fetchall():
        if row["first"] > period.end:
            continue  # the reserve had nothing posted yet
        kept = row["kept"] if row["latest"] <= period.end else None
        name = row["account"].removeprefix(RESERVE_PREFIX)
        rolled = ReserveRollForward(
            name, row["currency_code"], row["opening"], row["postings"], row["closing"], kept
        )
        found.setdefault(row["partner"], []).append(rolled)
    return found


def read_posted(
    conn: psycopg.Connection[Any], partner: str | None, period: Period, schema: str = READ_SCHEMA
) -> set[int]:
    """The positions of the events of the period that posted to a transaction's books."""
    if not table_exists(conn, schema, "postings"):
        return set()
    statement = SQL(POSTED_SQL).format(postings=Identifier(schema, "postings"))
    bounds = {"start": period.start, "end": period.end, "partner": partner}
    rows = conn.cursor(row_factory=dict_row).execute(statement, bounds).fetchall()
    return {row["notification_id"] for row in rows}


def partners_of(events: Sequence[tuple[int, Any]]) -> set[str]:
    """Every partner with a transaction or a disputed report in the log."""
    found = set()
    for _, event in events:
        if isinstance(event, OPENED):
            found.add(event.order.partner)
        elif isinstance(event, DisputedReport.Recorded):
            found.add(event.partner)
    return found


def reconcile(
    partner: str,
    period: Period,
    events: Iterable[tuple[int, Any]],
    reserves: list[ReserveRollForward],
    posted: set[int],
) -> Reconciliation:
    """The partner's reconciliation of the period, from the log's events (`chain_events`) and its postings."""
    done = Reconciliation(partner, period, reserves=reserves)
    matcher = ReportMatcher(partner, period, posted)
    for position, event in events:
        matcher.take(position, event)
    done.reports = matcher.reports
    done.differences = [
        *(unbalanced(partner, period, rolled) for rolled in reserves if not rolled.balanced),
        *sorted(matcher.differences(), key=lambda d: (d.at, d.kind, d.tx_id)),
    ]
    return done


def unbalanced(partner: str, period: Period, rolled: ReserveRollForward) -> Difference:
    detail = (
        f"reserve {rolled.name} of {partner} in {rolled.code}: opening {rolled.opening} + postings "
        f"{rolled.postings} is not the closing {rolled.closing} (balance kept: {rolled.kept})"
    )
    return Difference("reserve_unbalanced", "reserve", "", period.end, detail)


@dataclass(frozen=True)
class Deal:
    code: str
    type: str
    crypto: str
    crypto_amount: Decimal


class ReportMatcher:
    """Follows the log's events up to the period's end and matches the partner's chain reports of the
    period to their transactions and postings. A transfer paying several transactions at once (a batched
    sendout, one chain transaction paying several addresses) is no difference: only a second transfer for
    one transaction, which the ledger refuses and keeps as a disputed report, is reported twice."""

    def __init__(self, partner: str, period: Period, posted: set[int]) -> None:
        self.partner = partner
        self.period = period
        self.posted = posted
        self.deals: dict[UUID, Deal] = {}
        self.awaiting: dict[UUID, datetime] = {}  # buys committed whose sendout no report showed yet
        self.seen_once: set[UUID] = set()  # sells whose first payment report (Confirming) posted its memo
        self.reports: list[ChainReport] = []
        self.found: list[Difference] = []

    def take(self, position: int, event: Any) -> None:
        at = happened_at(event)
        if at > self.period.end:
            return
        if isinstance(event, DisputedReport.Recorded):
            if event.partner == self.partner and self.period.holds(at):
                self.found.append(disputed(event))
        elif isinstance(event, OPENED):
            order = event.order
            if order.partner == self.partner:
                deal = Deal(order.code, order.type, order.crypto, order.quote.crypto_amount)
                self.deals[event.originator_id] = deal
        elif (deal := self.deals.get(event.originator_id)) is not None:
            if isinstance(event, T.Committed):
                self.awaiting[event.originator_id] = at
            else:
                self._reported(position, event, deal, at)

    def _reported(self, position: int, event: Any, deal: Deal, at: datetime) -> None:
        self.awaiting.pop(event.originator_id, None)
        first_seen = isinstance(event, T.Confirming) and event.originator_id not in self.seen_once
        if isinstance(event, T.Confirming):
            self.seen_once.add(event.originator_id)
        if not self.period.holds(at):
            return
        payment = event.payment
        posts = isinstance(event, POSTING) or first_seen
        report = ChainReport(
            report="sendout" if deal.type == TransactionType.BUY else "deposit",
            transaction_code=deal.code,
            tx_id=payment.tx_id,
            amount=payment.amount,
            confirmations=payment.confirmations,
            event=type(event).__name__,
            at=at,
            posted=(position in self.posted) if posts else None,
        )
        self.reports.append(report)
        self.found.extend(judged(report, deal))

    def differences(self) -> list[Difference]:
        """What the reports of the period showed, and the buys still waiting for their sendout at its end."""
        waiting = [
            Difference(
                "expected_not_reported",
                "sendout",
                "",
                at,
                f"buy {self.deals[key].code} committed at {at.isoformat()}: no sendout reported by "
                f"{self.period.end.isoformat()}",
                self.deals[key].code,
            )
            for key, at in self.awaiting.items()
        ]
        return [*self.found, *waiting]


def judged(report: ChainReport, deal: Deal) -> list[Difference]:
    """The differences one recorded report shows: a payment of another amount (the sell BLOCKED), a payment
    to an expired sell (to refund), a posting the postings lack."""
    found = []

    def difference(kind: str, detail: str) -> None:
        found.append(
            Difference(kind, report.report, report.tx_id, report.at, detail, report.transaction_code)
        )

    if report.event == "Blocked":
        difference(
            "amount_mismatch",
            f"payment of {report.amount} {deal.crypto} to sell {deal.code}, "
            f"which quoted {deal.crypto_amount}",
        )
    if report.event == "PaidLate":
        difference(
            "reported_not_expected",
            f"payment of {report.amount} {deal.crypto} to sell {deal.code} after its validUntil: to refund",
        )
    if report.posted is False:
        difference("not_posted", f"{report.event} of {deal.code} has no posting in the ledger's postings")
    return found


def disputed(event: Any) -> Difference:
    """A report that changed no transaction, by why (`domain.chain_reports.Dispute`)."""
    reason = Dispute(event.reason)
    where = (
        f"address {event.address} ({event.crypto})"
        if event.report == "deposit" and event.address
        else f"transaction {event.transaction_code}"
    )
    amount = "" if event.amount is None else f" of {event.amount}"
    detail = (
        f"{event.report} {event.tx_id}{amount} with {event.confirmations} confirmation(s) to {where}: "
        f"{reason.value.replace('_', ' ')}"
    )
    code = event.transaction_code
    return Difference(DISPUTE_KINDS[reason], event.report, event.tx_id, event.at, detail, code)


def reconcile_ledger(url: str, partner: str | None, period: Period) -> list[Reconciliation]:
    """`audit reconcile`: the period of one partner, or of every partner with a transaction, a disputed
    report or a reserve, each of its own book; read in one snapshot of the postings, and the log up to
    their position."""
    log_app = LedgerLog(env=small_pool(eventsourcing_env(url, EVENTS_SCHEMA)))
    try:
        with snapshot(url) as conn:
            position = read_position(conn)
            reserves = read_reserves(conn, partner, period)
            posted = read_posted(conn, partner, period)
        events = list(chain_events(log_app.recorder, log_app.mapper, position))
    finally:
        log_app.close()
    partners = [partner] if partner else sorted(partners_of(events) | set(reserves))
    return [reconcile(name, period, events, reserves.get(name, []), posted) for name in partners]
