"""`read.chain_reports`: every chain report the ledger recorded, by partner and time, for the reconciliation.

The `Postings` projection (`projections.ledger_postings`) keeps this table beside the postings, in the same
transactions and at the same position, so a reconciliation reads a partner's reports and postings of a
period in one snapshot, by index (`(partner, at)`), and never decodes an event of the log, another
partner's least of all (`projections.reconciliation`). One row per event a reconciliation looks at:

- a buy's `Committed` (a sendout is expected from then on; `tx_id` NULL);
- each report recorded on a transaction: `SendoutSeen`, `Confirming`, `ToPayout`, `Completed`, `Blocked`,
  `PaidLate`, and a refund's sendout (`RefundSendoutSeen`, `Refunded`), with what the watcher said
  (`tx_id`, `crypto_amount`, `confirmations`), what the transaction quoted (`crypto_code`,
  `quoted_amount`) and whether the event posts (`posts`: a first `Confirming` and
  every `ToPayout`, `Completed`, `Blocked`, `PaidLate`, `Refunded`);
- a report that changed no transaction (`Disputed`, `domain.chain_reports.DisputedReport`), with `reason`
  and, for a deposit, the `address` it was sent to.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from psycopg import Cursor
from psycopg.rows import DictRow
from psycopg.sql import SQL, Composed, Identifier

from domain.transaction import Transaction, TransactionType
from projections.base.json_rows import json_rows
from projections.base.postgres import ReadModel

T = Transaction
REFUND_SENDOUTS = (T.RefundSendoutSeen, T.Refunded)  # a sell's sendout: its refund's
REPORTED = (T.SendoutSeen, T.Confirming, T.ToPayout, T.Completed, T.Blocked, T.PaidLate, *REFUND_SENDOUTS)
POSTING = (T.ToPayout, T.Completed, T.Blocked, T.PaidLate, T.Refunded)  # every one posts (a first Confirming)
DISPUTED = "Disputed"
COMMITTED = "Committed"

TABLE = "chain_reports"
CHAIN_REPORTS = """CREATE TABLE IF NOT EXISTS {chain_reports} (
    notification_id bigint PRIMARY KEY,
    partner text NOT NULL,
    event text NOT NULL,
    report text NOT NULL,
    transaction_id uuid,
    transaction_code text,
    tx_id text,
    crypto_amount numeric,
    confirmations integer,
    crypto_code text,
    quoted_amount numeric,
    posts boolean,
    reason text,
    address text,
    at timestamptz NOT NULL)"""
INDEXES = (  # (name, columns[, where]): a partner's rows of a period; a transaction's rows in the log's order
    ("chain_reports_by_partner", "partner, at", ""),
    ("chain_reports_by_transaction", "transaction_id, notification_id", ""),
    ("chain_commits_by_partner", "partner, at", f"WHERE event = '{COMMITTED}'"),
)
COLUMNS = (
    "bigint, text, text, text, uuid, text, text, numeric, integer, text, numeric, boolean, text, text, "
    "timestamptz"
)


def create_statements(table: Callable[[str], Identifier]) -> list[Composed]:
    """The table and its indexes, names qualified by `table`."""
    statements = [SQL(CHAIN_REPORTS).format(chain_reports=table(TABLE))]
    statements += [
        SQL("CREATE INDEX IF NOT EXISTS {} ON {} (" + columns + ") " + where).format(
            Identifier(name), table(TABLE)
        )
        for name, columns, where in INDEXES
    ]
    return statements


def append(view: ReadModel, curs: Cursor[DictRow], row: tuple[Any, ...]) -> None:
    """Adds a row as `report_row` and `disputed_row` make it to the view's batch (`ReadModel.append_row`);
    a row there already (its event applied again) is left as it is."""
    insert = view.statement(
        ("chain reports",),
        lambda: SQL("INSERT INTO {} " + json_rows(COLUMNS) + " ON CONFLICT DO NOTHING").format(
            view.table(TABLE)
        ),
    )
    view.append_row(curs, TABLE, insert, row)


def report_row(event: Any, deal: Any, position: int, first_seen: bool) -> tuple[Any, ...] | None:
    """The row of a transaction's event (`deal`: its `posting_rules.Deal`), or None for an event that is no
    chain report nor a commit. `first_seen`: no payment was seen for the transaction before this one."""
    kind = "sendout" if deal.type == TransactionType.BUY or isinstance(event, REFUND_SENDOUTS) else "deposit"
    where = (deal.partner, type(event).__name__, kind, event.originator_id, deal.code)
    quoted = (deal.crypto, deal.crypto_amount)
    if isinstance(event, T.Committed):
        return (position, *where, None, None, None, *quoted, None, None, None, event.at)
    if not isinstance(event, REPORTED):
        return None
    payment = event.payment
    posts = isinstance(event, POSTING) or (isinstance(event, T.Confirming) and first_seen)
    said = (payment.tx_id, payment.amount, payment.confirmations)
    return (position, *where, *said, *quoted, posts, None, None, event.at)


def disputed_row(event: Any, position: int) -> tuple[Any, ...]:
    """The row of a `DisputedReport.Recorded`: the report as the watcher sent it, why it changed nothing."""
    where = (event.partner, DISPUTED, event.report, None, event.transaction_code)
    said = (event.tx_id, event.amount, event.confirmations, event.crypto, None, None)
    return (position, *where, *said, event.reason, event.address, event.at)
