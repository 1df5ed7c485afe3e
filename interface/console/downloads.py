"""The console's CSV files: a transaction search (every transaction it matches, up to MOST_ROWS) and a
period's reconciliation (its reserves rolled forward, its chain reports and its differences, one row each).

A file is written as the partner's exports are (`projections.export_files`, docs/analytics.md): amounts
positionally at their asset's scale, instants in UTC ISO 8601, and a text cell that a spreadsheet would take
for a formula (one that begins with `=`, `+`, `-`, `@`, a tab or a carriage return) written with a leading
`'`; amounts, counts and instants are never changed (a negative amount stays `-0.00100000`). Each is sent as
`text/csv` with `Content-Disposition: attachment` and the console's headers."""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable
from datetime import datetime
from decimal import Decimal
from typing import Any

from litestar import Response

from interface.console.pages import HEADERS
from interface.console.reconciling import PeriodReconciliation
from interface.shared import transaction_shapes as r
from projections.export_files import inert, text_of

MOST_ROWS = 10_000  # the most transactions one search's file holds (the API pages through the rest)
TRANSACTION_COLUMNS = (
    "transaction_code",
    "type",
    "status",
    "customer_code",
    "payment_method_code",
    "fiat_value",
    "currency_code",
    "crypto_amount",
    "crypto_code",
    "crypto_price",
    "payment_reference",
    "blockchain_transaction_id",
    "created",
    "updated",
)
RECONCILIATION_COLUMNS = (
    "row",  # reserve, report or difference
    "reserve",
    "asset",
    "opening",
    "postings",
    "closing",
    "balanced",
    "kind",
    "report",
    "transaction_code",
    "tx_id",
    "crypto_amount",
    "confirmations",
    "event",
    "posted",
    "at",
    "detail",
)


def cell(value: Any) -> str:
    """One cell: text made inert, amounts positional, instants in UTC, nothing for None."""
    if isinstance(value, str):
        return inert(value)
    if isinstance(value, Decimal):
        return format(value, "f")
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, datetime):
        return text_of(value).replace("+00:00", "Z")
    return text_of(value)


def csv_text(columns: tuple[str, ...], rows: Iterable[dict[str, Any]]) -> str:
    """The CSV of `rows` (each by column name, a missing one empty), with its header line."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\r\n")
    writer.writerow(columns)
    writer.writerows([cell(row.get(column)) for column in columns] for row in rows)
    return out.getvalue()


def transactions_csv(transactions: list[r.Transaction]) -> str:
    return csv_text(TRANSACTION_COLUMNS, (transaction_row(tx) for tx in transactions))


def transaction_row(tx: r.Transaction) -> dict[str, Any]:
    executed = tx.executed_amounts
    return {
        "transaction_code": tx.transaction_code,
        "type": tx.type,
        "status": tx.status,
        "customer_code": tx.customer_code,
        "payment_method_code": tx.payment_method_code,
        "fiat_value": executed.fiat_value,
        "currency_code": tx.currency_code,
        "crypto_amount": executed.crypto_amount,
        "crypto_code": tx.crypto_code,
        "crypto_price": executed.crypto_price,
        "payment_reference": tx.payment_reference,
        "blockchain_transaction_id": tx.blockchain_transaction_id,
        "created": tx.created,
        "updated": tx.updated,
    }


def reconciliation_csv(done: PeriodReconciliation) -> str:
    """Every reserve's roll-forward, then every chain report, then every difference of the period."""
    reserves = [
        {"row": "reserve", "reserve": rolled.name, "asset": rolled.code, "opening": rolled.opening}
        | {"postings": rolled.postings, "closing": rolled.closing, "balanced": rolled.balanced}
        for rolled in done.reserves
    ]
    reports = [
        {"row": "report", "report": report.report, "transaction_code": report.transaction_code}
        | {"tx_id": report.tx_id, "crypto_amount": report.amount, "confirmations": report.confirmations}
        | {"event": report.event, "posted": report.posted, "at": report.at}
        for report in done.reports
    ]
    differences = [
        {"row": "difference", "kind": d.kind, "report": d.report, "transaction_code": d.transaction_code}
        | {"tx_id": d.tx_id, "at": d.at, "detail": d.detail}
        for d in done.differences
    ]
    return csv_text(RECONCILIATION_COLUMNS, [*reserves, *reports, *differences])


def csv_file(text: str, filename: str) -> Response[str]:
    """`text` as a CSV file to download, named `filename`, with the console's headers."""
    headers = {**HEADERS, "Content-Disposition": f'attachment; filename="{filename}"'}
    return Response(text, media_type="text/csv; charset=utf-8", headers=headers)
