"""Reading transactions: one by code, a filtered page of them (both from the read models), and the history
of one from the event store, optionally as it stood at a time. Brokers, auditors and operators read them (the
operator finds the sells it pays out and resolves: `status=ToPayout`, `BLOCKED`, `paidLate=true`...), each
its own partner's only."""

from __future__ import annotations

import math
from datetime import datetime
from typing import Annotated

from litestar import Controller, Request, get
from litestar.di import NamedDependency
from litestar.params import QueryParameter

from application.history import History
from interface.http.dependencies import HistoryDep, SettingsDep, principal
from interface.http.documented import code_parameter, problems, version_header
from interface.http.heavy_reads import HEAVY_READ
from interface.http.security import AUDITOR, BROKER, OPERATOR, authorize, roles
from interface.shared import transaction_presenters as presenters
from interface.shared import transaction_shapes as r
from interface.shared.query_parameters import STATUSES, TYPES, choice, moment, moment_of, one_of
from interface.shared.transaction_reading import Reader
from projections.queries import TransactionFilter

ReaderDep = NamedDependency[Reader]
TransactionCode = Annotated[str, code_parameter("the transaction's code")]
MAX_PAGE_SIZE = 200
MAX_PAGE = 1_000_000
PAID_LATE = (
    "true: only the late payments still to resolve (sells CANCELLED with a payment that came after "
    "validUntil, recorded against them); false: all but those"
)


class TransactionReadingController(Controller):
    path = "/transactions/custodian"
    tags = ["Transactions"]
    guards = [authorize]
    opt = roles(BROKER, AUDITOR, OPERATOR)
    parameters = version_header()

    @get("/", operation_id="listTransactions", sync_to_thread=True, opt={HEAVY_READ: "asOf"})  # asOf: heavy
    def list_transactions(
        self,
        request: Request,
        reader: ReaderDep,
        history: HistoryDep,
        customer_code: Annotated[
            str | None, QueryParameter(name="customerCode", required=False, min_length=1, max_length=64)
        ] = None,
        status: Annotated[str | None, choice("status", STATUSES)] = None,
        kind: Annotated[str | None, choice("type", TYPES)] = None,
        created_from: Annotated[str | None, moment("from", "created at or after this time")] = None,
        created_to: Annotated[str | None, moment("to", "created before this time")] = None,
        page: Annotated[int, QueryParameter(ge=1, le=MAX_PAGE, description="page number, from 1")] = 1,
        page_size: Annotated[int, QueryParameter(name="pageSize", ge=1, le=MAX_PAGE_SIZE)] = 50,
        as_of: Annotated[
            str | None, moment("asOf", "the list as it stood then: each transaction as it was then")
        ] = None,
        paid_late: Annotated[
            bool | None, QueryParameter(name="paidLate", required=False, description=PAID_LATE)
        ] = None,
    ) -> r.TransactionPage:
        """The partner's transactions, newest first, narrowed by customer, status, type, creation time and
        whether they are late payments still to resolve (`paidLate`); with `asOf`, the list as it stood at
        that time (by the ledger's clock, as the history's `asOf`): the transactions created by then,
        `status` and `paidLate` narrowing by their state then, each shown as it stood then (replayed from the
        event log, as the history shows it)."""
        where = transaction_filter(customer_code, status, kind, created_from, created_to, paid_late)
        partner = principal(request).partner
        at = moment_of("asOf", as_of)
        if at is not None:
            return page_at(reader, history, partner, where, at, page, page_size)
        total, rows = reader.transactions(partner, where, page, page_size)
        return presenters.transaction_page(reader.ledger.settings, page, page_size, total, rows)

    @get("/{tx_code:str}", operation_id="getTransaction", responses=problems(404), sync_to_thread=True)
    def read(self, request: Request, tx_code: TransactionCode, reader: ReaderDep) -> r.TransactionEnvelope:
        """A transaction of the partner, as of the caller's latest write at least (from the event store when
        the read models do not show it yet)."""
        return reader.transaction(principal(request).partner, tx_code)

    @get(
        "/{tx_code:str}/history",
        operation_id="getTransactionHistory",
        responses=problems(404),
        sync_to_thread=True,
    )
    def history(
        self,
        request: Request,
        tx_code: TransactionCode,
        history: HistoryDep,
        settings: SettingsDep,
        as_of: Annotated[str | None, moment("asOf", "the transaction as it stood then")] = None,
    ) -> r.TransactionHistory:
        """Every event of a transaction (version, type, timestamp, data) from the event store; with `asOf`,
        the events up to that time and the transaction as it stood then."""
        at = moment_of("asOf", as_of)
        transaction, events = history.transaction_history(principal(request).partner, tx_code, at)
        return presenters.history(settings, transaction, events, at)


def page_at(
    reader: Reader,
    history: History,
    partner: str,
    where: TransactionFilter,
    at: datetime,
    page: int,
    page_size: int,
) -> r.TransactionPage:
    """A page of the list as it stood at `at`: which transactions and their order from the read models'
    status history, each shown as its events up to `at` left it."""
    paid_late_then = (
        None if where.paid_late is None else late_payments_at(reader, history, partner, where, at)
    )
    total, rows = reader.transactions_at(partner, where, at, page, page_size, paid_late_then)
    transactions = history.transactions_at(partner, [row["transaction_code"] for row in rows], at)
    settings = reader.ledger.settings
    return r.TransactionPage(
        page=page,
        page_size=page_size,
        total=total,
        total_pages=math.ceil(total / page_size),
        records=[presenters.transaction(settings, tx).transaction for tx in transactions],
    )


def late_payments_at(
    reader: Reader, history: History, partner: str, where: TransactionFilter, at: datetime
) -> list[str]:
    """The codes of the partner's late payments still to resolve at `at`: of the sells CANCELLED then that
    have a payment now, those whose payment was recorded by then (replayed from the log)."""
    candidates = reader.late_payment_candidates_at(partner, where, at)
    return [tx.code for tx in history.transactions_at(partner, candidates, at) if tx.payment is not None]


def transaction_filter(
    customer_code: str | None,
    status: str | None,
    kind: str | None,
    created_from: str | None,
    created_to: str | None,
    paid_late: bool | None = None,
) -> TransactionFilter:
    """The list's filter; `status` is any status a recorded transaction can have (`STATUSES`, from the
    domain's `Status`, so a status the domain adds is taken at once)."""
    return TransactionFilter(
        customer_code=customer_code,
        status=one_of("status", status, STATUSES),
        type=one_of("type", kind, TYPES),
        created_from=moment_of("from", created_from),
        created_to=moment_of("to", created_to),
        paid_late=paid_late,
    )
