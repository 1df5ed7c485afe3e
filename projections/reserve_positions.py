"""A partner's reserves as read from the `Postings` view: per reserve and asset, the total and what is locked
and unconfirmed, from the partner's rows of `read.balances` (kept by `projections.ledger_postings`). Reserves
are each partner's own book: nothing of another partner's balances or reserve names is read.

- total: the balance of the reserve's account `reserve:<name>` in the asset;
- locked: what the partner's open transactions have promised out of it: for its hot wallet the crypto owed to
  buyers of its committed buys and their network fees, for its bank the payouts owed to its sellers;
- available: total minus locked;
- unconfirmed: sellers' payments seen on chain, not yet confirmed (the hot wallet's memo account);
- updated: when a posting last touched one of these accounts in the asset (None if never).

Now, from `read.balances`; as of an instant (`asOf`) and at the end of each day (the console's charts), from
`balances_at`, the one SQL definition of an account's sum as of an instant (`projections.daily_balances`).
"""

from __future__ import annotations

import time as clock
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal

import psycopg
from psycopg.rows import tuple_row
from psycopg.sql import SQL, Identifier

from domain.reserves import BUILT_IN
from projections.base.postgres import READ_SCHEMA
from projections.daily_balances import FUNCTION
from projections.posting_rules import LOCKED_ACCOUNTS, RESERVE_PREFIX, UNCONFIRMED_ACCOUNTS

# what reading the view's tables raises before they (or their per-partner shape, or `balances_at`) exist
BEFORE_THE_VIEW = (
    psycopg.errors.UndefinedTable,
    psycopg.errors.UndefinedColumn,
    psycopg.errors.UndefinedFunction,
)
TRACKING_TABLE = "postings_tracking"  # the view's tracking table: the projection's name + "_tracking"
APPLICATION = "Ledger"


@dataclass(frozen=True)
class ReservePosition:
    name: str
    type: str
    code: str
    total: Decimal
    locked: Decimal
    unconfirmed: Decimal
    updated: datetime | None

    @property
    def available(self) -> Decimal:
        return self.total - self.locked


@dataclass(frozen=True)
class Balance:
    account: str
    code: str
    balance: Decimal
    updated: datetime


def positions(
    balances: Iterable[Balance], types: dict[str, str], always: Iterable[tuple[str, str]] = ()
) -> list[ReservePosition]:
    """The reserve positions: one per reserve and asset with a balance, and one per (name, code) of `always`
    (the built-in reserves of the configured assets) even before anything was posted to it."""
    by_key = {(b.account, b.code): b for b in balances}
    wanted = {(_reserve_of(b.account), b.code) for b in by_key.values()}
    wanted = {key for key in wanted if key[0] in types or key[0] in BUILT_IN} | set(always)
    found = []
    for name, code in sorted(wanted, key=lambda key: (key[1], key[0])):
        total = by_key.get((RESERVE_PREFIX + name, code))
        locked = [by_key.get((account, code)) for account in LOCKED_ACCOUNTS.get(name, ())]
        unconfirmed = [by_key.get((account, code)) for account in UNCONFIRMED_ACCOUNTS.get(name, ())]
        feeding = [b for b in (total, *locked, *unconfirmed) if b is not None]
        found.append(
            ReservePosition(
                name=name,
                type=BUILT_IN[name].value if name in BUILT_IN else types[name],
                code=code,
                total=total.balance if total else Decimal(0),
                locked=-sum((b.balance for b in locked if b), Decimal(0)),  # liabilities: credit balances
                unconfirmed=sum((b.balance for b in unconfirmed if b), Decimal(0)),
                updated=max((b.updated for b in feeding), default=None),
            )
        )
    return found


def _reserve_of(account: str) -> str:
    """The reserve an account belongs to: its own for `reserve:<name>`, the hot wallet or the bank for the
    accounts of what they owe or have seen unconfirmed."""
    for name, accounts in (*LOCKED_ACCOUNTS.items(), *UNCONFIRMED_ACCOUNTS.items()):
        if account in accounts:
            return name
    return account.removeprefix(RESERVE_PREFIX)


# the rows of a partner's reserves, their locked and their unconfirmed amounts (parameters: partner, accounts)
RESERVE_OF = "(account LIKE 'reserve:%%' OR account = ANY(%s))"
RESERVE_ROWS = "partner = %s AND " + RESERVE_OF
RESERVE_ACCOUNTS = [
    account for group in (LOCKED_ACCOUNTS, UNCONFIRMED_ACCOUNTS) for a in group.values() for account in a
]


def read_positions(
    conn: psycopg.Connection,
    partner: str,
    always: Iterable[tuple[str, str]] = (),
    schema: str = READ_SCHEMA,
) -> list[ReservePosition]:
    """The partner's reserve positions as the view has them now (none posted while its tables, or their
    per-partner shape, do not exist yet: see `Postings._create_table`)."""
    try:
        with conn.transaction():
            rows = conn.execute(
                SQL(f"SELECT account, currency_code, balance, updated FROM {{}} WHERE {RESERVE_ROWS}").format(
                    Identifier(schema, "balances")
                ),
                (partner, RESERVE_ACCOUNTS),
            ).fetchall()
            types = dict(
                conn.execute(
                    SQL("SELECT name, type FROM {} WHERE partner = %s").format(
                        Identifier(schema, "reserve_places")
                    ),
                    (partner,),
                )
            )
    except BEFORE_THE_VIEW:
        rows, types = [], {}
    return positions([Balance(*row) for row in rows], types, always)


def _sums_at(conn: psycopg.Connection, partner: str, at: datetime, schema: str) -> list[tuple]:
    """Per reserve account and asset, the sum of the partner's postings up to `at` (included) and when the
    last of them happened: `balances_at`, the one definition of that sum (`projections.daily_balances`)."""
    return conn.execute(
        SQL(f"SELECT account, currency_code, balance, updated FROM {{}}(%s, %s) WHERE {RESERVE_OF}").format(
            Identifier(schema, FUNCTION)
        ),
        (partner, at, RESERVE_ACCOUNTS),
    ).fetchall()


def _day_end(day: date) -> datetime:
    """The last instant of a UTC day (PostgreSQL keeps microseconds): what a day's closing is as of."""
    return datetime.combine(day, time.max, UTC)


def read_positions_at(
    conn: psycopg.Connection,
    partner: str,
    at: datetime,
    always: Iterable[tuple[str, str]] = (),
    schema: str = READ_SCHEMA,
) -> list[ReservePosition]:
    """The partner's reserve positions as the ledger held them at `at`: each balance the sum of the
    partner's postings whose event happened at or before `at` (the postings' `at` is the event's ledger time,
    the time base of `asOf`), and the reserves named by then. Summed by `balances_at` from the days of
    `read.daily_balances` and the postings of `at`'s own day, never from a kept snapshot of an instant, so
    it cannot drift from them; `read.balances` is the same sum over every posting."""
    try:
        with conn.transaction():
            rows = _sums_at(conn, partner, at, schema)
            types = dict(
                conn.execute(
                    SQL("SELECT name, type FROM {} WHERE partner = %s AND created <= %s").format(
                        Identifier(schema, "reserve_places")
                    ),
                    (partner, at),
                )
            )
    except BEFORE_THE_VIEW:
        rows, types = [], {}
    return positions([Balance(*row) for row in rows], types, always)


# each day's closing: `balances_at` at the day's last instant
DAILY_SUMS = f"""SELECT d.day::date, b.account, b.currency_code, b.balance, b.updated
FROM generate_series(%(first)s::date::timestamp, %(last)s::date::timestamp, interval '1 day') AS d (day)
CROSS JOIN LATERAL {{}}(%(partner)s,
    (d.day + interval '1 day') AT TIME ZONE 'UTC' - interval '1 microsecond') AS b
WHERE {RESERVE_OF.replace("%s", "%(accounts)s")}
ORDER BY 1"""


def read_daily_positions(
    conn: psycopg.Connection,
    partner: str,
    first: date,
    last: date,
    always: Iterable[tuple[str, str]] = (),
    schema: str = READ_SCHEMA,
) -> list[tuple[date, list[ReservePosition]]]:
    """The partner's reserve positions at the end of each UTC day from `first` to `last` (both included): each
    day's as `read_positions_at` the day's last instant gives them (`balances_at` then), in one query whatever
    the number of days, with the reserves named by the day's end."""
    parameters = {"partner": partner, "first": first, "last": last, "accounts": RESERVE_ACCOUNTS}
    try:
        with conn.transaction():
            daily = conn.execute(SQL(DAILY_SUMS).format(Identifier(schema, FUNCTION)), parameters).fetchall()
            places = conn.execute(
                SQL("SELECT name, type, created FROM {} WHERE partner = %s").format(
                    Identifier(schema, "reserve_places")
                ),
                (partner,),
            ).fetchall()
    except BEFORE_THE_VIEW:
        daily, places = [], []
    return _day_by_day(first, last, daily, places, list(always))


def _day_by_day(
    first: date,
    last: date,
    daily: list[tuple],
    places: list[tuple],
    always: list[tuple[str, str]],
) -> list[tuple[date, list[ReservePosition]]]:
    """The positions of each day, from its closing balances and the reserves named by its end."""
    closings: dict[date, list[Balance]] = {}
    for day, *closing in daily:
        closings.setdefault(day, []).append(Balance(*closing))
    found = []
    day = first
    while day <= last:
        types = {name: kind for name, kind, created in places if created <= _day_end(day)}
        found.append((day, positions(closings.get(day, []), types, always)))
        day += timedelta(days=1)
    return found


def read_position(conn: psycopg.Connection, schema: str = READ_SCHEMA) -> int:
    """The notification id of the last event the view has processed (0 before the first)."""
    try:
        with conn.transaction():
            row = (
                conn.cursor(row_factory=tuple_row)  # whatever the connection's row factory
                .execute(
                    SQL("SELECT notification_id FROM {} WHERE application_name = %s").format(
                        Identifier(schema, TRACKING_TABLE)
                    ),
                    (APPLICATION,),
                )
                .fetchone()
            )
    except psycopg.errors.UndefinedTable:
        return 0
    return row[0] if row else 0


def wait_for_position(
    conn: psycopg.Connection, head: int, timeout: float = 2.0, schema: str = READ_SCHEMA
) -> bool:
    """Waits up to `timeout` seconds for the view to reach `head`; tells whether it did."""
    deadline = clock.monotonic() + timeout
    pause = 0.005
    while read_position(conn, schema) < head:
        if clock.monotonic() >= deadline:
            return False
        clock.sleep(pause)
        pause = min(pause * 2, 0.05)
    return True
