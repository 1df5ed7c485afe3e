"""Snapshots of the postings read model, each in one REPEATABLE READ transaction, and the rules every
snapshot must keep (docs/analytics.md, "Ledger postings"; projections/ledger_postings.py):

- the books balance: per currency, the debits of `read.postings` equal its credits, in each partner's
  books;
- `read.balances` (kept in the same database transaction as the postings) equals the postings summed per
  partner, account and currency;
- no account is on the wrong side: assets and expenses never credit balances, liabilities and revenue never
  debit balances (`trading` and `equity` may be either);
- each partner's reserves, as its `GET /reserves` computes them (`projections.reserve_positions.positions`
  of its own balances): total, locked, unconfirmed and available are never negative once the reserves are
  funded, as the test funds them.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from decimal import Decimal

import psycopg

from projections import posting_rules as rules
from projections.reserve_positions import Balance, ReservePosition, positions

DEBIT_BALANCES = (rules.CUSTOMER_RECEIVABLE, rules.UNCONFIRMED_DEPOSITS, rules.NETWORK_FEES)
CREDIT_BALANCES = (
    rules.CUSTOMER_CRYPTO_LIABILITY,
    rules.NETWORK_FEES_PAYABLE,
    rules.PAYOUT_LIABILITY,
    rules.FEE_REVENUE,
    rules.BANK_FEES,
    rules.NETWORK_FEE_RECOVERY,
    rules.DEPOSITS_PENDING,
    rules.SUSPENSE,
)


@dataclass(frozen=True)
class Snapshot:
    position: int  # the postings projection's position in the event log
    postings: int  # rows in read.postings
    problems: list[str]
    reserves: dict[tuple[str, str, str], ReservePosition]  # (partner, name, asset)


def take_snapshot(connection: psycopg.Connection) -> Snapshot:
    """Reads the postings, balances, reserve places and position in one REPEATABLE READ transaction."""
    with connection.transaction():
        sides = connection.execute(
            "SELECT partner, currency_code, sum(debit), sum(credit), count(*) FROM read.postings "
            "GROUP BY 1, 2"
        ).fetchall()
        summed = connection.execute(
            "SELECT partner, account, currency_code, sum(debit) - sum(credit) FROM read.postings "
            "GROUP BY 1, 2, 3"
        ).fetchall()
        balances = connection.execute(
            "SELECT partner, account, currency_code, balance, updated FROM read.balances"
        ).fetchall()
        places = connection.execute("SELECT partner, name, type FROM read.reserve_places").fetchall()
        row = connection.execute(
            "SELECT notification_id FROM read.postings_tracking WHERE application_name = 'Ledger'"
        ).fetchone()
    problems = [f"{p} {code}: debits {dr} != credits {cr}" for p, code, dr, cr, _ in sides if dr != cr]
    problems += _balances_against_postings(balances, {(p, a, c): amount for p, a, c, amount in summed})
    problems += _wrong_sides(balances)
    reserves = _reserves_per_partner(balances, places)
    problems += _negative_reserves(list(reserves.values()))
    return Snapshot(
        position=row[0] if row else 0,
        postings=sum(count for *_, count in sides),
        problems=problems,
        reserves=reserves,
    )


def _reserves_per_partner(
    balances: list[tuple], places: list[tuple]
) -> dict[tuple[str, str, str], ReservePosition]:
    """Each partner's reserve positions, from its own balances and reserve names only."""
    found = {}
    for partner in {row[0] for row in balances}:
        own = [Balance(*row[1:]) for row in balances if row[0] == partner]
        types = {name: kind for owner, name, kind in places if owner == partner}
        found |= {(partner, p.name, p.code): p for p in positions(own, types)}
    return found


def _balances_against_postings(
    balances: list[tuple], summed: dict[tuple[str, str, str], Decimal]
) -> list[str]:
    kept = {(partner, account, code): balance for partner, account, code, balance, _ in balances}
    return [
        f"balance of {key} is {kept.get(key)}, its postings sum to {summed.get(key)}"
        for key in kept.keys() | summed.keys()
        if kept.get(key, Decimal(0)) != summed.get(key, Decimal(0))
    ]


def _wrong_sides(balances: list[tuple]) -> list[str]:
    problems = []
    for partner, account, code, balance, _ in balances:
        if (account in DEBIT_BALANCES and balance < 0) or (account in CREDIT_BALANCES and balance > 0):
            problems.append(f"{partner}'s {account} {code} is on the wrong side: {balance}")
    return problems


def _negative_reserves(reserves: list[ReservePosition]) -> list[str]:
    return [
        f"reserve {p.name} {p.code}: {name} {value} < 0"
        for p in reserves
        for name, value in (
            ("total", p.total),
            ("locked", p.locked),
            ("unconfirmed", p.unconfirmed),
            ("available", p.available),
        )
        if value < 0
    ]


def snapshot_connection(database_url: str) -> psycopg.Connection:
    connection = psycopg.connect(database_url, connect_timeout=10)
    connection.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
    connection.read_only = True
    return connection


@dataclass
class Auditor:
    """A thread taking snapshots back to back until `stop()`, keeping the count and the first problems."""

    database_url: str
    taken: int = 0
    postings_seen: int = 0
    problems: list[str] = field(default_factory=list)
    errors: list[BaseException] = field(default_factory=list)
    _stopping: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            with snapshot_connection(self.database_url) as connection:
                while not self._stopping.is_set():
                    snapshot = take_snapshot(connection)
                    self.taken += 1
                    self.postings_seen = max(self.postings_seen, snapshot.postings)
                    if snapshot.problems and len(self.problems) < 20:
                        self.problems += [f"at position {snapshot.position}: {p}" for p in snapshot.problems]
                    time.sleep(0.005)
        except BaseException as error:
            self.errors.append(error)

    def stop(self) -> None:
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
