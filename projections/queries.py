"""Reads of the read models for the API: plain rows of `read.transactions`, always of one partner; and which
of them existed at an instant, with their status then (`transaction_page_at`)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import date, datetime
from decimal import Decimal
from typing import Any

import psycopg
from psycopg.rows import dict_row
from psycopg.sql import SQL, Composable, Identifier, Placeholder

from projections.base.postgres import READ_SCHEMA
from projections.read_models import ReadModels

# a late payment waiting to be resolved: a sell CANCELLED with a payment recorded against it, which only its
# `PaidLate` event records (an expired sell never gets a payment otherwise; a refund moves it on)
PAID_LATE = SQL("(type = 'BROKERSELL' AND status = 'CANCELLED' AND blockchain_tx_id IS NOT NULL)")


@dataclass(frozen=True)
class TransactionFilter:
    """What the list of transactions may be narrowed to; `created_from` inclusive, `created_to` exclusive;
    `paid_late` True: the late payments still to resolve (`PAID_LATE`), False: all but those."""

    customer_code: str | None = None
    status: str | None = None
    type: str | None = None
    created_from: datetime | None = None
    created_to: datetime | None = None
    paid_late: bool | None = None

    def conditions(self) -> tuple[Composable, dict[str, Any]]:
        """The WHERE clause (partner added by the caller) and its parameters."""
        params: dict[str, Any] = {}
        parts: list[Composable] = []
        for column, operator, value in (
            ("customer_code", "=", self.customer_code),
            ("status", "=", self.status),
            ("type", "=", self.type),
            ("created", ">=", self.created_from),
            ("created", "<", self.created_to),
        ):
            if value is not None:
                name = f"p{len(params)}"
                params[name] = value
                parts.append(SQL("{} " + operator + " {}").format(Identifier(column), Placeholder(name)))
        if self.paid_late is not None:
            parts.append(PAID_LATE if self.paid_late else SQL("NOT ") + PAID_LATE)
        return SQL("").join(SQL(" AND ") + part for part in parts), params


def find_transaction(view: ReadModels, partner: str, code: str) -> dict[str, Any] | None:
    with view.datastore.transaction(commit=False) as curs:
        return curs.execute(
            SQL("SELECT * FROM {} WHERE partner = %s AND transaction_code = %s").format(
                view.table("transactions")
            ),
            (partner, code),
        ).fetchone()


def transaction_page(
    view: ReadModels, partner: str, where: TransactionFilter, page: int, page_size: int
) -> tuple[int, list[dict[str, Any]]]:
    """How many transactions match, and those of page `page` (from 1), newest first."""
    conditions, params = where.conditions()
    params |= {"partner": partner, "limit": page_size, "offset": (page - 1) * page_size}
    source = SQL("SELECT * FROM {} WHERE partner = %(partner)s{}").format(
        view.table("transactions"), conditions
    )
    return _newest_first(view, source, params)


def transaction_page_at(
    view: ReadModels,
    partner: str,
    where: TransactionFilter,
    at: datetime,
    page: int,
    page_size: int,
    paid_late_then: list[str] | None = None,
) -> tuple[int, list[dict[str, Any]]]:
    """How many of the partner's transactions that existed at `at` match, and the code and status then
    (`status`, `version`) of those of page `page`, newest first: a transaction exists from its creation
    (`created`, the ledger's time), and its status at `at` is the last of `read.transaction_status_history`
    at or before it (each change's `at`, the same time base). The filter's status is the status then; its
    `paid_late` is by `paid_late_then`, the codes of the late payments still to resolve then (which the
    log tells: `late_payment_candidates_at`); its other conditions are on what never changes (customer, type,
    creation)."""
    conditions, params = replace(where, status=None, paid_late=None).conditions()
    then: list[Composable] = []
    if where.status is not None:
        params["status_then"] = where.status
        then.append(SQL("status = %(status_then)s"))
    if where.paid_late is not None:
        params["paid_late_then"] = list(paid_late_then or [])
        late = SQL("transaction_code = ANY(%(paid_late_then)s::text[])")
        then.append(late if where.paid_late else SQL("NOT ") + late)
    params |= {"partner": partner, "at": at, "limit": page_size, "offset": (page - 1) * page_size}
    chosen = SQL(" WHERE ") + SQL(" AND ").join(then) if then else SQL("")
    return _newest_first(
        view, SQL("SELECT * FROM ({}) AS e{}").format(_existing_at(view, conditions), chosen), params
    )


def late_payment_candidates_at(
    view: ReadModels, partner: str, where: TransactionFilter, at: datetime
) -> list[str]:
    """The codes of the partner's sells matching `where`'s unchanging conditions that were CANCELLED at `at`
    and have a payment recorded now: every late payment still to resolve at `at`, and maybe some whose late
    payment came only after it (the log tells them apart: the read models keep no time of the payment)."""
    conditions, params = replace(where, status=None, paid_late=None).conditions()
    params |= {"partner": partner, "at": at}
    source = SQL(
        "SELECT e.transaction_code FROM ({}) AS e JOIN {} AS t ON t.partner = %(partner)s "
        "AND t.transaction_code = e.transaction_code WHERE e.status = 'CANCELLED' "
        "AND t.type = 'BROKERSELL' AND t.blockchain_tx_id IS NOT NULL"
    ).format(_existing_at(view, conditions), view.table("transactions"))
    with view.datastore.transaction(commit=False) as curs:
        return [row["transaction_code"] for row in curs.execute(source, params).fetchall()]


def _existing_at(view: ReadModels, conditions: Composable) -> Composable:
    """The partner's transactions that existed at `%(at)s` and match `conditions` (on what never changes):
    code, creation, status then and the version of the change that made it."""
    return SQL(
        "SELECT t.transaction_code, t.created, h.to_status AS status, h.version FROM {} AS t "
        "JOIN LATERAL (SELECT to_status, version FROM {} AS h WHERE h.partner = t.partner "
        "AND h.transaction_code = t.transaction_code AND h.at <= %(at)s "
        "ORDER BY h.version DESC LIMIT 1) AS h ON true "
        "WHERE t.partner = %(partner)s AND t.created <= %(at)s{}"
    ).format(view.table("transactions"), view.table("transaction_status_history"), conditions)


def _newest_first(
    view: ReadModels, source: Composable, params: dict[str, Any]
) -> tuple[int, list[dict[str, Any]]]:
    """How many rows `source` (a query of transactions) gives, and those of the page `params` names (`limit`,
    `offset`), newest first: both in one transaction, so the count and the page agree."""
    with view.datastore.transaction(commit=False) as curs:
        counted = curs.execute(SQL("SELECT count(*) AS total FROM ({}) AS matching").format(source), params)
        total = counted.fetchone()["total"]
        rows = curs.execute(
            SQL(
                "SELECT * FROM ({}) AS matching ORDER BY created DESC, transaction_code DESC "
                "LIMIT %(limit)s OFFSET %(offset)s"
            ).format(source),
            params,
        ).fetchall()
    return total, rows


def transaction_postings(conn: psycopg.Connection, partner: str, code: str) -> list[dict[str, Any]]:
    """The ledger postings of the partner's transaction `code`, in the order they were booked (none while
    the `Postings` view has no table yet)."""
    try:
        with conn.transaction():
            return (
                conn.cursor(row_factory=dict_row)
                .execute(
                    SQL(
                        "SELECT notification_id, entry, event, account, currency_code, debit, credit, at "
                        "FROM {} WHERE partner = %s AND transaction_code = %s ORDER BY notification_id, entry"
                    ).format(Identifier(READ_SCHEMA, "postings")),
                    (partner, code),
                )
                .fetchall()
            )
    except psycopg.errors.UndefinedTable:
        return []


@dataclass(frozen=True)
class DailyVolume:
    """The volume of one UTC day in one currency and payment method: transactions and their fiat value."""

    day: date
    currency_code: str
    payment_method_code: str
    count: int
    fiat_value: Decimal


def daily_volumes(view: ReadModels, partner: str, first: date, last: date) -> list[DailyVolume]:
    """The partner's volumes per day, currency and payment method from `first` to `last` (both included),
    summed over customers, types and crypto-currencies; a day without any has no row."""
    with view.datastore.transaction(commit=False) as curs:
        rows = curs.execute(
            SQL(
                "SELECT day, currency_code, payment_method_code, sum(count) AS count, "
                "sum(fiat_value) AS fiat_value FROM {} WHERE partner = %s AND day BETWEEN %s AND %s "
                "GROUP BY day, currency_code, payment_method_code ORDER BY day"
            ).format(view.table("daily_volumes")),
            (partner, first, last),
        ).fetchall()
    return [DailyVolume(**row) for row in rows]
