"""The reconciliation of a partner's period: its reserves rolled forward, and every chain report of the period
matched to its transaction and its posting, with the differences an auditor must look into.

The period is (start, end], on the history's time base (an event's `at`, when the ledger decided it): the
opening is the books as they stood at `start` (what `asOf=start` shows), the closing as they stood at `end`.
Everything is read from the `Postings` view's tables, by the partner's indexes, in one transaction and up
to one position of the view: a reconciliation never reads the event log, and costs what the partner's own
reports and postings cost, whatever other partners recorded.

- Reserves: per reserve (`reserve:<name>`) and asset with a posting by `end`: the opening (postings up to
  `start`) and the closing (postings up to `end`), each by `balances_at` (`projections.daily_balances`: the
  one definition of a reserve's sum, from `read.daily_balances` and the postings of the bound's own day),
  and the period's postings summed from the partner's rows of `read.postings` themselves; opening +
  postings = closing must hold (the daily sums agree with the postings), and when nothing was posted to
  the reserve after `end` the closing must also equal the balance `read.balances` keeps (kept by
  `projections.ledger_postings`).
- Chain reports, from `read.chain_reports` (`projections.chain_reports`): the events a deposit or sendout
  report recorded on a transaction (Confirming, ToPayout, Completed, Blocked, PaidLate, SendoutSeen), each
  with whether the posting it made is in `read.postings`, in the log's order: a page of them (`Window`), and
  how many there are.
- Differences, by kind: `reported_not_expected` (a payment to no sell's address, a sendout of no waiting
  buy, a payment to an expired sell), `expected_not_reported` (a buy committed by `end` whose sendout no
  report showed by then), `amount_mismatch` (a payment of another amount than quoted, a transfer reported
  again with another amount), `confirmation_mismatch` (a transfer reported again with fewer confirmations),
  `reported_twice` (a second transfer for one transaction, or one transfer for two), `not_posted` (a report
  whose posting the ledger's postings lack), `reserve_unbalanced`; the reports that changed no transaction
  (`domain.chain_reports.DisputedReport`) are differences by why. Only the rows that show one are read.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import Any

import psycopg
from psycopg.rows import dict_row
from psycopg.sql import SQL, Identifier

from domain.chain_reports import Dispute
from projections import daily_balances
from projections.audit_sql import snapshot, table_exists
from projections.base.postgres import READ_SCHEMA
from projections.chain_reports import DISPUTED, TABLE
from projections.posting_rules import RESERVE_PREFIX
from projections.reserve_positions import read_position

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
    reports: list[ChainReport] = field(default_factory=list)  # the window's (every one without a limit)
    report_total: int = 0
    differences: list[Difference] = field(default_factory=list)  # every one

    @property
    def clean(self) -> bool:
        return not self.differences


@dataclass(frozen=True)
class Window:
    """Which reports to read, in the log's order: from `offset`, at most `limit` (None: every one)."""

    offset: int = 0
    limit: int | None = None


# the opening and closing by `balances_at` (`projections.daily_balances`), the one definition of an account's
# sum as of an instant; the period's postings read from `read.postings` themselves, so that the roll-forward
# checks the daily sums against them; the last posting time of each reserve from its latest day
RESERVES_SQL = """SELECT c.partner, c.account, c.currency_code, coalesce(o.balance, 0) AS opening,
    coalesce(m.moved, 0) AS postings, c.balance AS closing, b.balance AS kept,
    coalesce((SELECT d.updated FROM {daily_balances} d WHERE d.partner = c.partner AND d.account = c.account
        AND d.currency_code = c.currency_code ORDER BY d.day DESC LIMIT 1), c.updated) AS latest
  FROM {balances_at}(%(partner)s, %(end)s) c
  LEFT JOIN {balances_at}(%(partner)s, %(start)s) o
    ON o.partner = c.partner AND o.account = c.account AND o.currency_code = c.currency_code
  LEFT JOIN (SELECT p.partner, p.account, p.currency_code, sum(p.debit) - sum(p.credit) AS moved
      FROM {postings} p WHERE p.account LIKE %(reserves)s AND p.at > %(start)s AND p.at <= %(end)s
        AND (%(partner)s::text IS NULL OR p.partner = %(partner)s)
      GROUP BY p.partner, p.account, p.currency_code) m
    ON m.partner = c.partner AND m.account = c.account AND m.currency_code = c.currency_code
  LEFT JOIN {balances} b
    ON b.partner = c.partner AND b.account = c.account AND b.currency_code = c.currency_code
  WHERE c.account LIKE %(reserves)s
  ORDER BY c.partner, c.currency_code, c.account"""


def read_reserves(
    conn: psycopg.Connection[Any], partner: str | None, period: Period, schema: str = READ_SCHEMA
) -> dict[str, list[ReserveRollForward]]:
    """Each partner's reserves with a posting by the period's end, rolled over the period (one partner's
    with `partner`)."""
    if not table_exists(conn, schema, daily_balances.TABLE):
        return {}
    names = ("postings", "balances", daily_balances.TABLE, daily_balances.FUNCTION)
    bounds = {"start": period.start, "end": period.end, "partner": partner}
    statement = SQL(RESERVES_SQL).format(**{name: Identifier(schema, name) for name in names})
    rows = conn.cursor(row_factory=dict_row).execute(statement, {**bounds, "reserves": RESERVE_PREFIX + "%"})
    found: dict[str, list[ReserveRollForward]] = {}
    for row in rows.fetchall():
        kept = row["kept"] if row["latest"] <= period.end else None
        name = row["account"].removeprefix(RESERVE_PREFIX)
        rolled = ReserveRollForward(
            name, row["currency_code"], row["opening"], row["postings"], row["closing"], kept
        )
        found.setdefault(row["partner"], []).append(rolled)
    return found


# the partner's rows of the period up to the view's position (`projections.chain_reports`: 'Committed' and
# 'Disputed' are its events of a commit and of a report that changed nothing); whether a row's event posted
# is whether the postings hold its position (NULL for an event that posts nothing)
IN_PERIOD = """r.partner = %(partner)s AND r.at > %(start)s AND r.at <= %(end)s
    AND r.notification_id <= %(position)s AND r.event <> 'Committed'"""
POSTED = """EXISTS (SELECT FROM {postings} p WHERE p.notification_id = r.notification_id
    AND p.partner = r.partner AND p.transaction_code IS NOT NULL)"""
ROWS = "SELECT r.*, CASE WHEN r.posts THEN " + POSTED + " END AS posted FROM {reports} r WHERE " + IN_PERIOD
REPORTS_SQL = f"{ROWS} AND r.event <> 'Disputed' ORDER BY r.notification_id LIMIT %(limit)s OFFSET %(offset)s"
COUNT_SQL = f"SELECT count(*) AS total FROM {{reports}} r WHERE {IN_PERIOD} AND r.event <> 'Disputed'"
DIFFERING_SQL = f"""{ROWS}
    AND (r.event IN ('Disputed', 'Blocked', 'PaidLate') OR (r.posts AND NOT {POSTED}))
  ORDER BY r.notification_id"""
# the buys committed by the end whose sendout no report showed by then
AWAITING_SQL = """SELECT c.transaction_code, c.at FROM {reports} c
  WHERE c.partner = %(partner)s AND c.event = 'Committed' AND c.at <= %(end)s
    AND c.notification_id <= %(position)s
    AND NOT EXISTS (SELECT FROM {reports} r WHERE r.transaction_id = c.transaction_id
      AND r.notification_id > c.notification_id AND r.notification_id <= %(position)s AND r.at <= %(end)s
      AND r.event NOT IN ('Committed', 'Disputed'))
  ORDER BY c.notification_id"""
PARTNERS_SQL = "SELECT DISTINCT partner FROM {reports} WHERE notification_id <= %(position)s"


def read_reconciliation(
    conn: psycopg.Connection[Any],
    partner: str,
    period: Period,
    position: int,
    reserves: list[ReserveRollForward],
    window: Window = Window(),
    schema: str = READ_SCHEMA,
) -> Reconciliation:
    """The partner's reconciliation of the period, as the `Postings` view held it at `position` (read
    first, in the same transaction): its reports in `window`, how many there are, every difference."""
    done = Reconciliation(partner, period, reserves=reserves)
    unbalanced_reserves = [unbalanced(partner, period, r) for r in reserves if not r.balanced]
    if not table_exists(conn, schema, TABLE):
        done.differences = unbalanced_reserves
        return done
    tables = {"reports": Identifier(schema, TABLE), "postings": Identifier(schema, "postings")}
    bounds = {"partner": partner, "start": period.start, "end": period.end, "position": position}
    paged = {**bounds, "limit": window.limit, "offset": window.offset}
    cursor = conn.cursor(row_factory=dict_row)
    done.reports = [report_of(row) for row in cursor.execute(SQL(REPORTS_SQL).format(**tables), paged)]
    done.report_total = cursor.execute(SQL(COUNT_SQL).format(**tables), bounds).fetchone()["total"]
    found = [*differences_of(cursor.execute(SQL(DIFFERING_SQL).format(**tables), bounds).fetchall())]
    found += [awaiting(period, row) for row in cursor.execute(SQL(AWAITING_SQL).format(**tables), bounds)]
    done.differences = [*unbalanced_reserves, *sorted(found, key=lambda d: (d.at, d.kind, d.tx_id))]
    return done


def report_of(row: Mapping[str, Any]) -> ChainReport:
    return ChainReport(
        report=row["report"],
        transaction_code=row["transaction_code"],
        tx_id=row["tx_id"],
        amount=row["crypto_amount"],
        confirmations=row["confirmations"],
        event=row["event"],
        at=row["at"],
        posted=row["posted"],
    )


def differences_of(rows: list[Mapping[str, Any]]) -> list[Difference]:
    """What the reports that show a difference show: a disputed report by why; a recorded one by
    `judged`."""
    return [
        difference
        for row in rows
        for difference in ([disputed(row)] if row["event"] == DISPUTED else judged(report_of(row), row))
    ]


def awaiting(period: Period, row: Mapping[str, Any]) -> Difference:
    code, at = row["transaction_code"], row["at"]
    detail = f"buy {code} committed at {at.isoformat()}: no sendout reported by {period.end.isoformat()}"
    return Difference("expected_not_reported", "sendout", "", at, detail, code)


def unbalanced(partner: str, period: Period, rolled: ReserveRollForward) -> Difference:
    detail = (
        f"reserve {rolled.name} of {partner} in {rolled.code}: opening {rolled.opening} + postings "
        f"{rolled.postings} is not the closing {rolled.closing} (balance kept: {rolled.kept})"
    )
    return Difference("reserve_unbalanced", "reserve", "", period.end, detail)


def judged(report: ChainReport, deal: Mapping[str, Any]) -> list[Difference]:
    """The differences one recorded report shows (`deal`: its row, with what the transaction quoted): a
    payment of another amount (the sell BLOCKED), a payment to an expired sell (to refund), a posting the
    postings lack."""
    found = []
    code, crypto, quoted = report.transaction_code, deal["crypto_code"], deal["quoted_amount"]

    def difference(kind: str, detail: str) -> None:
        found.append(Difference(kind, report.report, report.tx_id, report.at, detail, code))

    if report.event == "Blocked":
        difference(
            "amount_mismatch", f"payment of {report.amount} {crypto} to sell {code}, which quoted {quoted}"
        )
    if report.event == "PaidLate":
        difference(
            "reported_not_expected",
            f"payment of {report.amount} {crypto} to sell {code} after its validUntil: to refund",
        )
    if report.posted is False:
        difference("not_posted", f"{report.event} of {code} has no posting in the ledger's postings")
    return found


def disputed(row: Mapping[str, Any]) -> Difference:
    """A report that changed no transaction, by why (`domain.chain_reports.Dispute`)."""
    reason = Dispute(row["reason"])
    where = (
        f"address {row['address']} ({row['crypto_code']})"
        if row["report"] == "deposit" and row["address"]
        else f"transaction {row['transaction_code']}"
    )
    amount = "" if row["crypto_amount"] is None else f" of {row['crypto_amount']}"
    detail = (
        f"{row['report']} {row['tx_id']}{amount} with {row['confirmations']} confirmation(s) to {where}: "
        f"{reason.value.replace('_', ' ')}"
    )
    code = row["transaction_code"]
    return Difference(DISPUTE_KINDS[reason], row["report"], row["tx_id"], row["at"], detail, code)


def reconcile_ledger(url: str, partner: str | None, period: Period) -> list[Reconciliation]:
    """`audit reconcile`: the period of one partner, or of every partner with a chain report, a commit or a
    reserve, each of its own book, every report of it; read in one snapshot of the `Postings` view."""
    with snapshot(url) as conn:
        position = read_position(conn)
        reserves = read_reserves(conn, partner, period)
        partners = [partner] if partner else sorted(partners_reporting(conn, position) | set(reserves))
        return [
            read_reconciliation(conn, name, period, position, reserves.get(name, [])) for name in partners
        ]


def partners_reporting(conn: psycopg.Connection[Any], position: int, schema: str = READ_SCHEMA) -> set[str]:
    """Every partner with a row in `read.chain_reports` up to `position`."""
    if not table_exists(conn, schema, TABLE):
        return set()
    rows = conn.cursor(row_factory=dict_row).execute(
        SQL(PARTNERS_SQL).format(reports=Identifier(schema, TABLE)), {"position": position}
    )
    return {row["partner"] for row in rows}
