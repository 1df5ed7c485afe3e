"""`read.daily_balances`: what each UTC day posted to each account of each partner's books, and
`read.balances_at(partner, at)`: THE one SQL definition of an account's sum, which every reader of a reserve
as of an instant uses (`asOf`, the console's charts, the reconciliation, the exports).

The table has one row per partner, account, asset and UTC day (the day of the postings' `at`, the ledger
time of their event) with a posting: that day's debits and credits, when the last of them happened and the
last event that posted. It is kept by the `Postings` view (`projections.ledger_postings`) in the same
transactions as `read.postings`, summed per batch like `read.balances`. Every account is kept, not only
reserves: a trial balance of any day costs the same rows, and a reserve's locked and unconfirmed amounts are
other accounts.

Only a day's own debits and credits are stored, never an opening or closing: a posting whose `at` falls on an
earlier day than postings already kept (the ledger clock is not decreasing, but nothing here relies on it)
adds to its own day's row and to nothing else, so the table is the same whatever the order the events
arrive in and whatever the batches a rebuild cuts the log into. Openings and closings are derived, by
`balances_at` only:

- `balances_at(partner, at)`: per account and asset of the partner (of every partner with NULL), the debits,
  credits, balance (debits minus credits) and last posting time of the postings whose `at` is at or before
  `at` (the `asOf` rule): the rows of the days that end by `at` (from this table), and the postings of
  the day `at` falls in up to `at` (from `read.postings`, by `postings_by_partner_time`). At a day's last
  instant (the next midnight less one microsecond, the finest time PostgreSQL keeps) it reads this table only.
- a day's closing is `balances_at` at its last instant, its opening the day before's closing.

A database whose `Postings` tables were created before this one gets it filled from `read.postings` when it
is created (`BACKFILL`, in the same transaction as the statements that create it, while the view's start
holds the projections' start lock), so nothing is dropped or replayed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from decimal import Decimal
from typing import Any

from psycopg.sql import SQL, Composed, Identifier, Literal

from projections.base.json_rows import json_rows

TABLE = "daily_balances"
FUNCTION = "balances_at"

DAILY_BALANCES = """CREATE TABLE IF NOT EXISTS {daily_balances} (
    partner text NOT NULL,
    account text NOT NULL,
    currency_code text NOT NULL,
    day date NOT NULL,
    debit numeric NOT NULL,
    credit numeric NOT NULL,
    updated timestamptz NOT NULL,
    notification_id bigint NOT NULL,
    PRIMARY KEY (partner, account, currency_code, day))"""
# the postings of the part of a day `balances_at` reads from them
POSTINGS_BY_TIME = "CREATE INDEX IF NOT EXISTS postings_by_partner_time ON {postings} (partner, at)"
# the one definition of an account's sum as of an instant (see the module's docstring)
BALANCES_AT = """CREATE OR REPLACE FUNCTION {function}(of_partner text, as_of timestamptz)
RETURNS TABLE (partner text, account text, currency_code text, debit numeric, credit numeric,
    balance numeric, updated timestamptz)
LANGUAGE sql STABLE AS $balances$
SELECT s.partner, s.account, s.currency_code, sum(s.debit), sum(s.credit), sum(s.debit) - sum(s.credit),
    max(s.updated)
FROM (
    SELECT d.partner, d.account, d.currency_code, d.debit, d.credit, d.updated FROM {daily_balances} AS d
    WHERE (of_partner IS NULL OR d.partner = of_partner)
        AND d.day < ((as_of + interval '1 microsecond') AT TIME ZONE 'UTC')::date
    UNION ALL
    SELECT p.partner, p.account, p.currency_code, p.debit, p.credit, p.at FROM {postings} AS p
    WHERE (of_partner IS NULL OR p.partner = of_partner)
        AND p.at >= date_trunc('day', as_of + interval '1 microsecond', 'UTC') AND p.at <= as_of
) AS s
GROUP BY s.partner, s.account, s.currency_code
$balances$"""
# created, or replaced when its text changed, only then: every process that opens the view runs this
CREATE_FUNCTION = """DO $create$ BEGIN
IF NOT EXISTS (SELECT FROM pg_proc WHERE oid = to_regprocedure({signature}) AND prosrc = {body}) THEN
{create};
END IF; END $create$"""
# a table created empty beside postings kept before it: each day's sums of them, at once
BACKFILL = """DO $backfill$ BEGIN
IF NOT EXISTS (SELECT FROM {daily_balances}) AND EXISTS (SELECT FROM {postings}) THEN
INSERT INTO {daily_balances}
SELECT partner, account, currency_code, (at AT TIME ZONE 'UTC')::date, sum(debit), sum(credit), max(at),
    max(notification_id)
FROM {postings} GROUP BY 1, 2, 3, 4;
END IF; END $backfill$"""
ADD_TO_DAYS = (
    "INSERT INTO {daily_balances} AS d "
    + json_rows("text, text, text, date, numeric, numeric, timestamptz, bigint")
    + " ON CONFLICT (partner, account, currency_code, day) DO UPDATE"
    " SET debit = d.debit + excluded.debit, credit = d.credit + excluded.credit,"
    " updated = greatest(d.updated, excluded.updated),"
    " notification_id = greatest(d.notification_id, excluded.notification_id)"
)


def create_statements(table: Callable[[str], Identifier]) -> list[Composed]:
    """The table, the index of the postings by time, the function, and the backfill (after `read.postings`
    is created)."""
    names = {"daily_balances": table(TABLE), "postings": table("postings")}
    create = SQL(BALANCES_AT).format(function=table(FUNCTION), **names).as_string()
    body = create[create.index("$balances$") + len("$balances$") : create.rindex("$balances$")]
    signature = f"{table(FUNCTION).as_string()}(text, timestamptz)"
    function = SQL(CREATE_FUNCTION).format(
        signature=Literal(signature), body=Literal(body), create=SQL(create)
    )
    return [
        SQL(DAILY_BALANCES).format(**names),
        SQL(POSTINGS_BY_TIME).format(**names),
        function,
        SQL(BACKFILL).format(**names),
    ]


def add_to_days(table: Callable[[str], Identifier]) -> Composed:
    """The statement that adds a batch's `DailyTotals.rows` to the table."""
    return SQL(ADD_TO_DAYS).format(daily_balances=table(TABLE))


def day_of(at: datetime) -> date:
    """The UTC day of an instant: the day a posting at `at` is kept under."""
    return at.astimezone(UTC).date()


@dataclass
class DailyTotals:
    """What a batch's postings add to each day's row (partner x account x currency x day): debits, credits,
    the latest `at` and the latest position."""

    days: dict[tuple[str, str, str, date], list[Any]] = field(default_factory=dict)

    def add(
        self, key: tuple[str, str, str], at: datetime, position: int, debit: Decimal, credit: Decimal
    ) -> None:
        totals = self.days.setdefault((*key, day_of(at)), [Decimal(0), Decimal(0), at, position])
        totals[0] += debit
        totals[1] += credit
        totals[2] = max(totals[2], at)
        totals[3] = max(totals[3], position)

    def rows(self) -> list[tuple[Any, ...]]:
        return [(*key, *totals) for key, totals in sorted(self.days.items())]
