"""What a period export holds: one partner's rows of the read models and postings for a period, as files.

`broker-ledger export` writes, for one partner and a period (from, to], five extracts and a manifest
(`projections.export_files` writes them). The period follows the history endpoint's `asOf` rule, an event
belongs to the state "as of" an instant when it happened at or before it, so that the opening balances are
the reserves as of `from`, the closing ones as of `to`, and the postings of the period move one to the other:

- `transactions`: the transactions with a change of status in the period (their creation included), as the
  read model has them now;
- `status_history`: their changes of status in the period;
- `postings`: the partner's postings in the period;
- `balances`: per reserve and asset, the balance at both ends and the period's debits and credits (by
  `read.balances_at`, `projections.daily_balances`);
- `daily_volumes`: per UTC day that begins in the period (from <= its midnight < to), payment method, type,
  currency and crypto-currency, the volumes of `read.daily_volumes` summed over customers.

Every query names the partner, so no other partner's row can enter a file. All are read in one read-only,
repeatable-read transaction, so the files agree with each other.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

import psycopg
from psycopg.sql import SQL, Identifier

from projections.base.postgres import READ_SCHEMA

BATCH_ROWS = 5_000


class Kind(StrEnum):
    """A column's type in the files: text, whole numbers, amounts, times with their zone, UTC days."""

    TEXT = "text"
    INTEGER = "integer"
    AMOUNT = "amount"
    PRICE = "price"  # written as an amount, at its currency's scale, but never summed in the manifest
    PLACES = "places"  # the scale of the row's asset that `asset` names: not read, given by the settings
    TIME = "time"
    DAY = "day"


class Holds(StrEnum):
    """Which assets an amount column holds, which sets its scale in Parquet: the widest of them."""

    FIAT = "fiat"
    CRYPTO = "crypto"
    ANY = "any"  # postings and reserves of both; a price, which may have more places than its currency


@dataclass(frozen=True)
class Column:
    """A column of an extract; an amount names the column that holds its row's asset (`asset`) and which
    assets it may be in (`holds`)."""

    name: str
    kind: Kind = Kind.TEXT
    asset: str | None = None
    holds: Holds | None = None


@dataclass(frozen=True)
class Period:
    """One partner's period (start, end], both instants aware."""

    partner: str
    start: datetime
    end: datetime


@dataclass(frozen=True)
class Assets:
    """The places of every fiat currency and crypto-currency, as the settings give them (projections do
    not read the settings: the command hands them over)."""

    fiat: dict[str, int]
    crypto: dict[str, int]

    @property
    def places(self) -> dict[str, int]:
        return {**self.fiat, **self.crypto}

    def scale(self, holds: Holds | None) -> int:
        """The widest scale among the assets a column holds."""
        group = {Holds.FIAT: self.fiat, Holds.CRYPTO: self.crypto}.get(holds or Holds.ANY, self.places)
        return max(group.values(), default=0)


@dataclass(frozen=True)
class Extract:
    """One file of the export: its name, its columns, and the query of its rows (columns in that order)."""

    name: str
    columns: tuple[Column, ...]
    query: str  # a SELECT with {table} placeholders and the parameters partner, start, end

    @property
    def amounts(self) -> tuple[Column, ...]:
        return tuple(column for column in self.columns if column.kind is Kind.AMOUNT)

    @property
    def selected(self) -> tuple[Column, ...]:
        """The columns its query reads (the places, given by the settings, come after them)."""
        return tuple(column for column in self.columns if column.kind is not Kind.PLACES)

    def with_places(self, rows: list[tuple[Any, ...]], places: dict[str, int]) -> list[tuple[Any, ...]]:
        """`rows` as read, each with the places of its assets appended (None for an asset not in `places`)."""
        index = {column.name: i for i, column in enumerate(self.columns)}
        assets = [
            index[column.asset] for column in self.columns if column.kind is Kind.PLACES and column.asset
        ]
        if not assets:
            return rows
        return [(*row, *(places.get(row[i]) for i in assets)) for row in rows]


def _texts(*names: str) -> tuple[Column, ...]:
    return tuple(Column(name) for name in names)


def _amounts(asset: str, holds: Holds, *names: str) -> tuple[Column, ...]:
    return tuple(Column(name, Kind.AMOUNT, asset, holds) for name in names)


FIAT, CRYPTO = "currency_code", "crypto_code"
PLACES_OF = {FIAT: "currency_places", CRYPTO: "crypto_places"}


def _places(*assets: str) -> tuple[Column, ...]:
    """The scale of each asset column's asset, beside the amounts (a Parquet column holding several assets is
    at the widest scale of them: this says at which the row's own amount is)."""
    return tuple(Column(PLACES_OF[asset], Kind.PLACES, asset) for asset in assets)


TRANSACTIONS = Extract(
    "transactions",
    (
        *_texts("partner", "transaction_code", "type", "status", "customer_code", "account_code", CRYPTO),
        *_texts(FIAT, "payment_method_code", "payment_reference", "blockchain_tx_id", "cancel_reason"),
        *_amounts(CRYPTO, Holds.CRYPTO, "crypto_amount", "partner_fee_crypto", "bank_fee_crypto"),
        *_amounts(CRYPTO, Holds.CRYPTO, "network_fee_crypto", "received_crypto_amount", "balance_crypto"),
        *_amounts(FIAT, Holds.FIAT, "fiat_value", "crypto_value", "partner_fee_fiat", "bank_fee_fiat"),
        *_amounts(FIAT, Holds.FIAT, "network_fee_fiat", "balance_fiat"),
        Column("crypto_price", Kind.PRICE, FIAT, Holds.ANY),
        Column("created", Kind.TIME),
        Column("updated", Kind.TIME),
        Column("valid_until", Kind.TIME),
        *_places(FIAT, CRYPTO),
    ),
    "SELECT {columns} FROM {transactions} t WHERE t.partner = %(partner)s AND EXISTS ("
    "SELECT 1 FROM {transaction_status_history} h WHERE h.partner = t.partner "
    "AND h.transaction_code = t.transaction_code AND h.at > %(start)s AND h.at <= %(end)s) "
    "ORDER BY t.created, t.transaction_code",
)

STATUS_HISTORY = Extract(
    "status_history",
    (
        *_texts("partner", "transaction_code"),
        Column("version", Kind.INTEGER),
        *_texts("from_status", "to_status"),
        Column("at", Kind.TIME),
        Column("event_type"),
        Column("notification_id", Kind.INTEGER),
    ),
    "SELECT {columns} FROM {transaction_status_history} WHERE partner = %(partner)s "
    "AND at > %(start)s AND at <= %(end)s ORDER BY notification_id, transaction_code, version",
)

POSTINGS = Extract(
    "postings",
    (
        Column("notification_id", Kind.INTEGER),
        Column("entry", Kind.INTEGER),
        *_texts("event", "partner", "transaction_code", "adjustment_code", "account", FIAT),
        *_amounts(FIAT, Holds.ANY, "debit", "credit"),
        Column("at", Kind.TIME),
        *_places(FIAT),
    ),
    "SELECT {columns} FROM {postings} WHERE partner = %(partner)s AND at > %(start)s AND at <= %(end)s "
    "ORDER BY notification_id, entry",
)

BALANCES = Extract(
    "balances",
    (
        *_texts("partner", "reserve", FIAT),
        *_amounts(FIAT, Holds.ANY, "opening", "debit", "credit", "closing"),
        *_places(FIAT),
    ),
    # the sums as of both ends by `balances_at`, the one definition of a reserve's sum
    # (`projections.daily_balances`); the period's debits and credits are what the closing adds to the opening
    "SELECT c.partner, substr(c.account, 9) AS reserve, c.currency_code, "
    "coalesce(o.balance, 0) AS opening, c.debit - coalesce(o.debit, 0) AS debit, "
    "c.credit - coalesce(o.credit, 0) AS credit, c.balance AS closing "
    "FROM {balances_at}(%(partner)s, %(end)s) c LEFT JOIN {balances_at}(%(partner)s, %(start)s) o "
    "ON o.account = c.account AND o.currency_code = c.currency_code "
    "WHERE c.account LIKE 'reserve:%%' ORDER BY c.currency_code, reserve",
)

VOLUME_SUMS = ("fiat_value", "partner_fee_fiat", "bank_fee_fiat", "network_fee_fiat", "fees_fiat")
DAILY_VOLUMES = Extract(
    "daily_volumes",
    (
        Column("partner"),
        Column("day", Kind.DAY),
        *_texts("payment_method_code", "type", FIAT, CRYPTO),
        Column("count", Kind.INTEGER),
        *_amounts(FIAT, Holds.FIAT, *VOLUME_SUMS),
        *_amounts(CRYPTO, Holds.CRYPTO, "crypto_amount", "fees_crypto"),
        *_places(FIAT, CRYPTO),
    ),
    "SELECT partner, day, payment_method_code, type, currency_code, crypto_code, sum(count)::bigint, "
    + ", ".join(f"sum({name})" for name in (*VOLUME_SUMS, "crypto_amount", "fees_crypto"))
    + " FROM {daily_volumes} WHERE partner = %(partner)s "
    "AND day::timestamp AT TIME ZONE 'UTC' >= %(start)s AND day::timestamp AT TIME ZONE 'UTC' < %(end)s "
    "GROUP BY partner, day, payment_method_code, type, currency_code, crypto_code "
    "ORDER BY day, payment_method_code, type, currency_code, crypto_code",
)

EXTRACTS = (TRANSACTIONS, STATUS_HISTORY, POSTINGS, BALANCES, DAILY_VOLUMES)
TABLES = ("transactions", "transaction_status_history", "postings", "daily_volumes", "balances_at")


def statement(extract: Extract, schema: str = READ_SCHEMA) -> psycopg.sql.Composed:
    """The extract's query, its tables in `schema` and its columns (where it says `{columns}`) listed."""
    columns = SQL(", ").join(Identifier(column.name) for column in extract.selected)
    tables = {name: Identifier(schema, name) for name in TABLES}
    return SQL(extract.query).format(columns=columns, **tables)


def parameters(period: Period) -> dict[str, Any]:
    return {"partner": period.partner, "start": period.start, "end": period.end}


def count_rows(conn: psycopg.Connection, extract: Extract, period: Period, schema: str = READ_SCHEMA) -> int:
    """How many rows the extract has, for the progress bar."""
    query = SQL("SELECT count(*) FROM ({}) AS rows").format(statement(extract, schema))
    row = conn.execute(query, parameters(period)).fetchone()
    return row[0] if row else 0


def read_batches(
    conn: psycopg.Connection, extract: Extract, period: Period, schema: str = READ_SCHEMA
) -> Iterator[list[tuple[Any, ...]]]:
    """The extract's rows in batches of at most BATCH_ROWS, through a server-side cursor (a large period
    is never held in memory at once); within the caller's transaction."""
    with conn.cursor(name=f"export_{extract.name}") as cursor:
        cursor.execute(statement(extract, schema), parameters(period))
        while batch := cursor.fetchmany(BATCH_ROWS):
            yield batch
