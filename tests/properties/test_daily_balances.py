"""Daily balances as a property: random postings of two partners' books, balanced per currency, at random
ledger times (on day boundaries, a microsecond before them, and late: earlier than postings already kept),
are written by the `Postings` view in random batches. Whatever the order and the batches:

- `read.daily_balances` holds, per partner, account, currency and UTC day, the postings summed directly;
- `read.balances_at(partner, at)`, the one definition of an account's sum, equals the postings at or before
  `at` summed directly, at every instant tried (a day's last instant: the day's closing, cumulative);
- at the end of time it equals `read.balances`, and the readers built on it (`asOf`, the charts' days)
  answer the same sums.
"""

from __future__ import annotations

import itertools
import uuid
from collections import defaultdict
from collections.abc import Iterator
from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal
from typing import Any

import psycopg
import pytest
from eventsourcing.persistence import Tracking
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from psycopg import sql

from domain.reserves import BUILT_IN
from projections.base.runner import ProjectionSpec, open_view
from projections.daily_balances import day_of
from projections.ledger_postings import Posting, Postings, PostingsProjection
from projections.posting_rules import Entry
from projections.reserve_positions import read_daily_positions, read_positions_at

POSTINGS = ProjectionSpec(PostingsProjection, Postings)
START = datetime(2026, 3, 10, tzinfo=UTC)
DAYS = 4
PARTNERS = ("demo", "other")
ACCOUNTS = ("reserve:hot-wallet", "reserve:bank", "reserve:cold-1", "customer_receivable", "equity")
CURRENCIES = ("BTC", "EUR")
Key = tuple[str, str, str]

# instants around the days' edges: a midnight, a microsecond before one, the middle of a day
instants = st.builds(
    lambda day, where: START + timedelta(days=day) + where,
    st.integers(min_value=0, max_value=DAYS - 1),
    st.sampled_from(
        [timedelta(0), timedelta(microseconds=1), timedelta(hours=12), timedelta(days=1, microseconds=-1)]
    )
    | st.timedeltas(min_value=timedelta(0), max_value=timedelta(days=1, microseconds=-1)),
)
amounts = st.decimals(min_value=Decimal("0.01"), max_value=Decimal(1000), places=2) | st.just(
    Decimal("0.00000001")
)
moves = st.tuples(
    st.sampled_from(ACCOUNTS), st.sampled_from(ACCOUNTS), st.sampled_from(CURRENCIES), amounts
).filter(lambda move: move[0] != move[1])
postings = st.lists(
    st.tuples(st.sampled_from(PARTNERS), instants, st.lists(moves, min_size=1, max_size=3)),
    min_size=1,
    max_size=25,
)


@pytest.fixture(scope="module")
def view(database_url: str) -> Iterator[Postings]:
    """The Postings view in a schema of its own, emptied before each example."""
    schema = f"d_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
    opened = open_view(database_url, POSTINGS, schema=schema)
    try:
        yield opened
    finally:
        opened.datastore.close()
        with psycopg.connect(database_url, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(schema)))


def entries_of(moves: list[tuple[str, str, str, Decimal]]) -> list[Entry]:
    """Each move debits one account and credits another, in one currency: balanced per currency."""
    return [
        entry
        for debited, credited, currency, amount in moves
        for entry in (Entry(debited, currency, debit=amount), Entry(credited, currency, credit=amount))
    ]


def write(view: Postings, made: list[Posting], cuts: list[int]) -> None:
    """The postings at positions 1, 2, ... in batches ending after each of `cuts` (then the rest)."""
    view.reset()
    bounds = [0, *sorted({cut for cut in cuts if 0 < cut < len(made)}), len(made)]
    for first, end in itertools.pairwise(bounds):
        with view.batch():
            for position in range(first + 1, end + 1):
                view.record(Tracking("Ledger", position), made[position - 1])


def summed(made: list[Posting], up_to: datetime | None = None) -> dict[Key, list[Any]]:
    """The postings (at or before `up_to`) summed directly per partner, account and currency: debit,
    credit, the last `at`."""
    sums: dict[Key, list[Any]] = {}
    for posting in made:
        if up_to is not None and posting.at > up_to:
            continue
        for e in posting.entries:
            totals = sums.setdefault(
                (posting.partner, e.account, e.currency), [Decimal(0), Decimal(0), posting.at]
            )
            totals[0] += e.debit
            totals[1] += e.credit
            totals[2] = max(totals[2], posting.at)
    return sums


def read_balances_at(
    conn: psycopg.Connection, schema: str, partner: str | None, at: Any
) -> dict[Key, list[Any]]:
    rows = conn.execute(
        sql.SQL(
            "SELECT partner, account, currency_code, debit, credit, balance, updated FROM {}(%s, %s)"
        ).format(sql.Identifier(schema, "balances_at")),
        (partner, at),
    ).fetchall()
    found = {}
    for partner_, account, code, debit, credit, balance, updated in rows:
        assert balance == debit - credit
        found[partner_, account, code] = [debit, credit, updated]
    return found


def day_end(day: date) -> datetime:
    return datetime.combine(day, time.max, UTC)


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    data=postings,
    cuts=st.lists(st.integers(min_value=1, max_value=24), max_size=4),
    probes=st.lists(instants, min_size=1, max_size=4),
)
def test_daily_balances_and_balances_at_equal_the_postings_summed_directly(
    view: Postings, database_url: str, data: list[Any], cuts: list[int], probes: list[datetime]
) -> None:
    made = [Posting("Recorded", at, entries_of(moved), partner) for partner, at, moved in data]
    write(view, made, cuts)
    schema = view.datastore.schema
    with psycopg.connect(database_url, autocommit=True) as conn:
        daily = conn.execute(
            sql.SQL("SELECT partner, account, currency_code, day, debit, credit, updated FROM {}").format(
                sql.Identifier(schema, "daily_balances")
            )
        ).fetchall()
        by_day: dict[tuple[str, str, str, date], list[Any]] = {}
        for posting in made:
            for day_key, totals in summed([posting]).items():
                kept = by_day.setdefault((*day_key, day_of(posting.at)), [Decimal(0), Decimal(0), posting.at])
                kept[0] += totals[0]
                kept[1] += totals[1]
                kept[2] = max(kept[2], totals[2])
        assert {(p, a, c, d): [dr, cr, u] for p, a, c, d, dr, cr, u in daily} == by_day

        days = [START.date() + timedelta(days=n) for n in range(-1, DAYS + 1)]
        moments = [*probes, *(p.at for p in made), *(day_end(day) for day in days), START]
        for at in moments:
            assert read_balances_at(conn, schema, None, at) == summed(made, at), at
        for partner in PARTNERS:
            expected = {key: v for key, v in summed(made, probes[0]).items() if key[0] == partner}
            assert read_balances_at(conn, schema, partner, probes[0]) == expected

        kept = conn.execute(
            sql.SQL("SELECT partner, account, currency_code, debit, credit, updated FROM {}").format(
                sql.Identifier(schema, "balances")
            )
        ).fetchall()
        at_the_end = read_balances_at(conn, schema, None, "infinity")
        assert {(p, a, c): [dr, cr] for p, a, c, dr, cr, _ in kept} == {
            k: v[:2] for k, v in at_the_end.items()
        }
        assert at_the_end == summed(made)

        readers_agree(conn, schema, made, days, probes)


def readers_agree(
    conn: psycopg.Connection, schema: str, made: list[Posting], days: list[date], probes: list[datetime]
) -> None:
    """`asOf` and the charts' days answer the reserves' totals the postings sum to."""
    for partner in PARTNERS:
        by_day = read_daily_positions(conn, partner, days[0], days[-1], schema=schema)
        assert [day for day, _ in by_day] == days
        for day, positions in by_day:
            assert totals(positions) == reserve_totals(made, partner, day_end(day))
        for at in probes:
            assert totals(read_positions_at(conn, partner, at, schema=schema)) == reserve_totals(
                made, partner, at
            )


def totals(positions: list[Any]) -> dict[tuple[str, str], Decimal]:
    return {(p.name, p.code): p.total for p in positions if p.total}


def reserve_totals(made: list[Posting], partner: str, at: datetime) -> dict[tuple[str, str], Decimal]:
    found: dict[tuple[str, str], Decimal] = defaultdict(Decimal)
    for (owner, account, code), (debit, credit, _) in summed(made, at).items():
        if owner == partner and account.removeprefix("reserve:") in BUILT_IN:  # others: named by none
            found[account.removeprefix("reserve:"), code] += debit - credit
    return {key: total for key, total in found.items() if total}
