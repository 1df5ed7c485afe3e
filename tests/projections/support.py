"""What the projection tests share: table contents as comparable rows, and the expected volumes."""

from __future__ import annotations

from collections import defaultdict
from datetime import UTC
from decimal import Decimal
from typing import Any

import pytest
from psycopg.sql import SQL, Identifier

from application.ledger import Ledger
from bench.history import Scenario
from domain.transaction import Status, Transaction
from interface.cli.main import main
from projections.read_models import ReadModels
from projections.read_tables import TABLES, VIEWS

ORDER_BY = {
    "customers": "partner, customer_code",
    "accounts": "partner, account_code",
    "transactions": "partner, transaction_code",
    "transaction_status_history": "partner, transaction_code, version",
    "daily_volumes": "partner, day, customer_code, payment_method_code, type, currency_code, crypto_code",
    "monthly_volumes": "partner, month, customer_code, payment_method_code, type, currency_code, crypto_code",
}


def rows(view: ReadModels, table: str) -> list[dict[str, Any]]:
    with view.datastore.transaction(commit=False) as curs:
        statement = SQL("SELECT * FROM {} ORDER BY " + ORDER_BY[table]).format(view.table(table))
        return [dict(row) for row in curs.execute(statement).fetchall()]


def contents(view: ReadModels) -> dict[str, list[dict[str, Any]]]:
    """Every table and view of the read models, row by row."""
    return {table: rows(view, table) for table in (*TABLES, *VIEWS)}


def tracking_position(view: ReadModels) -> int:
    with view.datastore.transaction(commit=False) as curs:
        statement = SQL("SELECT notification_id FROM {} WHERE application_name = 'Ledger'").format(
            Identifier(view.datastore.schema, view.tracking_table_name)
        )
        return curs.execute(statement).fetchone()["notification_id"]


def transactions(ledger: Ledger, done: Scenario) -> list[Transaction]:
    return [ledger.store.transaction(partner, code) for partner, code in done.transactions]


def expected_daily_volumes(ledger: Ledger, done: Scenario) -> dict[tuple, dict[str, Any]]:
    """The volumes computed from the aggregates: every transaction not cancelled nor refunded, by its creation
    day, at its amounts as they are (a BLOCKED sell's accepted amount priced again)."""
    volumes: dict[tuple, dict[str, Any]] = defaultdict(lambda: defaultdict(lambda: Decimal(0)))
    for tx in transactions(ledger, done):
        if tx.status in (Status.CANCELLED, Status.REFUNDING, Status.REFUNDED):
            continue
        order, quote, fees = tx.order, tx.order.quote, tx.order.quote.fees
        key = (
            order.partner,
            tx.created.astimezone(UTC).date(),
            order.customer_code,
            order.payment_method,
            str(order.type),
            order.currency,
            order.crypto,
        )
        sums = volumes[key]
        sums["count"] += 1
        sums["fiat_value"] += quote.fiat_value
        sums["crypto_amount"] += quote.crypto_amount
        sums["fees_fiat"] += fees.partner_fiat + fees.bank_fiat + fees.network_fiat
        sums["fees_crypto"] += fees.partner_crypto + fees.bank_crypto + fees.network_crypto
    return {key: dict(sums) for key, sums in volumes.items()}


def run_cli(*argv: str) -> int:
    """The exit status of `broker-ledger` run in-process with `argv`."""
    with pytest.raises(SystemExit) as exit_:
        main(list(argv))
    return exit_.value.code


def create_role(name: str, *options: str) -> int:
    """`analyst create-role` of a role `name` (password `pw-1`) with `options`; its exit status."""
    return run_cli("analyst", "create-role", "--name", name, "--password", "pw-1", *options)
