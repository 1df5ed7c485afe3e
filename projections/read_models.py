"""The read models: customers, accounts, transactions, their status history and volumes, as SQL tables.

`ReadModelsProjection` turns each event of the ledger into changes of the `ReadModels` tables, made in the
same database transaction as the event's position (`recording`), and tracks every other event's position
too (`skip`), so that a reader can wait for any position of the event log. Each change is also safe on its
own: rows are inserted once (ON CONFLICT DO NOTHING) and updated only by a newer aggregate version, so
volumes are counted once per transaction and taken back once on cancellation.
"""

from __future__ import annotations

from datetime import UTC
from decimal import Decimal
from functools import partial
from time import monotonic, sleep
from typing import Any
from uuid import UUID

import msgspec
from eventsourcing.dispatch import singledispatchmethod
from eventsourcing.domain import DomainEvent
from eventsourcing.persistence import Tracking
from eventsourcing.projection import Projection
from psycopg import Cursor
from psycopg.rows import DictRow
from psycopg.sql import SQL, Composed, Identifier

from domain.account import Account
from domain.customer import Customer, CustomerStatus
from domain.transaction import Resolution, Status, Transaction
from domain.transaction_view import priced, transaction_view
from projections.base.json_rows import ANY_ID, as_json, json_rows
from projections.base.postgres import ReadModel
from projections.read_tables import TABLES, VOLUME_SUMS, create_statements

# Rows as JSON records for jsonb_populate_recordset: amounts as exact decimal strings, times in RFC 3339.
ROWS_AS_JSON = msgspec.json.Encoder()
VOLUME_KEY = ("partner", "customer_code", "payment_method_code", "type", "currency_code", "crypto_code")
CREATE_LOCK = 0x52454144_4D4F444C  # serialises concurrent creation of the tables by several workers


class ReadModels(ReadModel):
    """The tables of the read models, their writes (each on the cursor of one `recording`) and position."""

    tables = TABLES

    def create_statements(self) -> list[Composed]:
        return create_statements(self.table)

    def _create_table(self, curs: Cursor[DictRow]) -> None:
        curs.execute("SELECT pg_advisory_xact_lock(%s)", (CREATE_LOCK,))
        super()._create_table(curs)

    def open_account(self, curs: Cursor[DictRow], row: dict[str, Any]) -> None:
        """Inserts an account's row unless its key is there already (accounts are never changed)."""
        insert = self.statement(
            ("insert accounts",),
            lambda: SQL(
                "INSERT INTO {0} SELECT * FROM jsonb_populate_recordset(NULL::{0}, %s::jsonb)"
                " ON CONFLICT DO NOTHING"
            ).format(self.table("accounts")),
        )
        self.append_row(curs, "accounts", insert, row)

    def rows_of(self, curs: Cursor[DictRow], table: str, row_id: UUID) -> dict[UUID, dict[str, Any]]:
        """The rows of `table` (customers or transactions) by id, with `row_id`'s if there is one (see
        `page_rows`: the caller keeps them as it changes them, and writes them with `keep`)."""
        return self.page_rows(curs, table, partial(self._select_rows, table), row_id)

    def _select_rows(self, table: str, curs: Cursor[DictRow], ids: list[UUID]) -> dict[UUID, dict[str, Any]]:
        select = self.statement(
            ("rows of", table),
            lambda: SQL("SELECT * FROM {} WHERE id = " + ANY_ID + " FOR UPDATE").format(self.table(table)),
        )
        return {row["id"]: row for row in self.fetch_all(curs, select, as_json(ids))}

    def register_customer(self, curs: Cursor[DictRow], row: dict[str, Any]) -> None:
        """Inserts a customer's first row, unless it is there."""
        rows = self.rows_of(curs, "customers", row["id"])
        if row["id"] not in rows:  # else applied already (the id is derived from partner and code)
            rows[row["id"]] = row
            self.keep(curs, "customers", row)

    def change_customer(
        self, curs: Cursor[DictRow], event: DomainEvent, tracking: Tracking, **values: Any
    ) -> None:
        """Sets `values` on the customer's row, if the row is of an older version than the event's. A value
        may be a function of the old row (`account_count`)."""
        rows = self.rows_of(curs, "customers", event.originator_id)
        old = rows.get(event.originator_id)
        if old is None or old["version"] >= event.originator_version:
            return  # applied already
        values = {name: value(old) if callable(value) else value for name, value in values.items()}
        new = {
            **old,
            **values,
            "version": event.originator_version,
            "notification_id": tracking.notification_id,
        }
        rows[event.originator_id] = new
        self.keep(curs, "customers", new)

    def create_transaction(
        self, curs: Cursor[DictRow], row: dict[str, Any], event: DomainEvent, tracking: Tracking
    ) -> None:
        """Inserts a transaction's first row, its first status and its volumes, unless it is there."""
        rows = self.rows_of(curs, "transactions", row["id"])
        if row["id"] in rows:
            return  # applied already (the id is derived from partner and code, the primary key)
        rows[row["id"]] = row
        self.keep(curs, "transactions", row)
        self.record_status(curs, row, None, row["status"], event, tracking)
        self.add_volume(curs, row, +1)

    def change_transaction(
        self, curs: Cursor[DictRow], event: DomainEvent, tracking: Tracking, **values: Any
    ) -> None:
        """Updates a transaction's row; a change of status is added to its history and a cancellation
        takes the transaction out of the volumes."""
        rows = self.rows_of(curs, "transactions", event.originator_id)
        old = rows.get(event.originator_id)
        if old is None or old["version"] >= event.originator_version:
            return  # applied already
        if not values.keys() <= old.keys():
            raise KeyError(f"read.transactions has no column {sorted(values.keys() - old.keys())}")
        status = values.get("status", old["status"])
        if status != old["status"]:
            values["previous_status"] = old["status"]
        new = {
            **old,
            **values,
            "version": event.originator_version,
            "notification_id": tracking.notification_id,
        }
        rows[event.originator_id] = new
        self.keep(curs, "transactions", new)
        counted = old["status"] not in OUT_OF_VOLUMES
        if status != old["status"]:
            self.record_status(curs, old, old["status"], status, event, tracking)
        if counted and (status in OUT_OF_VOLUMES or "fiat_value" in values):
            self.add_volume(curs, old, -1)
            if status not in OUT_OF_VOLUMES:  # priced again (a BLOCKED sell's amount accepted)
                self.add_volume(curs, new, +1)

    def keep(self, curs: Cursor[DictRow], table: str, row: dict[str, Any]) -> None:
        """Writes the row of `table` as it now is: in a batch, each changed row once, at its end."""
        kept = self.kept()
        changed = kept.setdefault(f"changed {table}", {}) if kept is not None else {}
        changed[row["id"]] = row
        self.at_batch_end(curs, table, partial(self._replace_rows, table, changed))

    def _replace_rows(self, table: str, changed: dict[UUID, dict[str, Any]], curs: Cursor[DictRow]) -> None:
        """Replaces these rows of `table` by the given ones (read FOR UPDATE by `rows_of`, so each is at
        least as new as the stored one): one DELETE and one INSERT of the rows as JSON records."""
        delete = self.statement(
            ("replace", table, "delete"),
            lambda: SQL("DELETE FROM {} WHERE id = " + ANY_ID).format(self.table(table)),
        )
        insert = self.statement(
            ("replace", table, "insert"),
            lambda: SQL(
                "INSERT INTO {0} SELECT * FROM jsonb_populate_recordset(NULL::{0}, %s::jsonb)"
            ).format(self.table(table)),
        )
        curs.execute(delete, as_json(list(changed)))
        curs.execute(insert, (ROWS_AS_JSON.encode(list(changed.values())).decode(),))

    def record_status(
        self,
        curs: Cursor[DictRow],
        transaction: dict[str, Any],
        from_status: str | None,
        to_status: str,
        event: DomainEvent,
        tracking: Tracking,
    ) -> None:
        row = (
            transaction["partner"],
            transaction["transaction_code"],
            event.originator_version,
            from_status,
            to_status,
            getattr(event, "at", event.timestamp),
            type(event).__name__,
            tracking.notification_id,
        )
        insert = self.statement(("status history",), self._insert_status_history)
        self.append_row(curs, "transaction_status_history", insert, row)

    def _insert_status_history(self) -> Composed:
        rows = json_rows("text, text, integer, text, text, timestamptz, text, bigint")
        return SQL("INSERT INTO {} " + rows + " ON CONFLICT DO NOTHING").format(
            self.table("transaction_status_history")
        )

    def add_volume(self, curs: Cursor[DictRow], transaction: dict[str, Any], sign: int) -> None:
        """Counts a transaction in the volumes of its day (UTC, by creation), or with -1 takes it out. In a
        batch the changes are summed per day and written at its end, in two statements."""
        key = (*(transaction[name] for name in VOLUME_KEY), transaction["created"].astimezone(UTC).date())
        change = (sign, *(sign * amount for amount in volume_amounts(transaction).values()))
        kept = self.kept()
        changes = kept.setdefault("volumes", {}) if kept is not None else {}
        before = changes.get(key, (0,) * len(change))
        changes[key] = tuple(a + b for a, b in zip(before, change, strict=True))
        self.at_batch_end(curs, "daily_volumes", partial(self._write_volumes, changes))

    def _write_volumes(self, changes: dict[tuple[Any, ...], tuple[Any, ...]], curs: Cursor[DictRow]) -> None:
        """Adds the summed changes to their days' rows, then drops the rows no transaction counts in: only
        a change that counts no more transactions than before (its count is 0 or less) can leave a row at 0,
        so a page that only adds transactions deletes nothing."""
        rows = [(*key, *change) for key, change in changes.items() if any(change)]
        if not rows:
            return
        curs.execute(self.statement(("add volumes",), self._add_volumes), as_json(rows))
        emptied = [key for key, change in changes.items() if any(change) and change[0] <= 0]
        if emptied:
            curs.execute(self.statement(("empty volumes",), self._empty_volumes), as_json(emptied))

    def _add_volumes(self) -> Composed:
        names = (*VOLUME_KEY, "day", "count", *VOLUME_SUMS)
        added = SQL(", ").join(
            SQL("{0} = v.{0} + excluded.{0}").format(Identifier(name)) for name in ("count", *VOLUME_SUMS)
        )
        rows = json_rows(
            ", ".join(["text"] * len(VOLUME_KEY) + ["date", "bigint"] + ["numeric"] * len(VOLUME_SUMS))
        )
        return SQL("INSERT INTO {} AS v ({}) " + rows + " ON CONFLICT ({}) DO UPDATE SET {}").format(
            self.table("daily_volumes"),
            SQL(", ").join(map(Identifier, names)),
            SQL(", ").join(map(Identifier, (*VOLUME_KEY, "day"))),
            added,
        )

    def _empty_volumes(self) -> Composed:
        names = (*VOLUME_KEY, "day")
        keys = json_rows(", ".join(["text"] * len(VOLUME_KEY) + ["date"]))
        return SQL("DELETE FROM {} AS v USING (" + keys + ") AS k ({}) WHERE {} AND v.count = 0").format(
            self.table("daily_volumes"),
            SQL(", ").join(map(Identifier, names)),
            SQL(" AND ").join(SQL("v.{0} = k.{0}").format(Identifier(name)) for name in names),
        )

    def caught_up(self, notification_id: int, timeout: float) -> bool:
        """Waits (at most `timeout` seconds) until this view has processed `notification_id`."""
        deadline = monotonic() + timeout
        interval = 0.002
        while self.position() < notification_id:
            remaining = deadline - monotonic()
            if remaining <= 0:
                return False
            sleep(min(interval, remaining))
            interval = min(interval * 2, 0.05)
        return True


def _one_more_account(customer: dict[str, Any]) -> int:
    return customer["account_count"] + 1


def volume_amounts(transaction: dict[str, Any]) -> dict[str, Decimal]:
    fees_fiat = ("partner_fee_fiat", "bank_fee_fiat", "network_fee_fiat")
    fees_crypto = ("partner_fee_crypto", "bank_fee_crypto", "network_fee_crypto")
    return {
        "fiat_value": transaction["fiat_value"],
        "crypto_amount": transaction["crypto_amount"],
        **{name: transaction[name] for name in fees_fiat},
        "fees_fiat": sum((transaction[name] for name in fees_fiat), Decimal(0)),
        "fees_crypto": sum((transaction[name] for name in fees_crypto), Decimal(0)),
    }


def transaction_row(event: Transaction.Staged | Transaction.Initiated, tracking: Tracking) -> dict[str, Any]:
    """The first row of a transaction: the view of the aggregate its first event makes (see
    `domain.transaction_view`: one column per field), and the row's version and position."""
    transaction: Transaction = event.mutate(None)
    return {
        **msgspec.structs.asdict(transaction_view(transaction)),
        "version": event.originator_version,
        "notification_id": tracking.notification_id,
    }


# a transaction cancelled or refunded is in no volume: what it was to trade did not trade
OUT_OF_VOLUMES = frozenset({Status.CANCELLED, Status.REFUNDING, Status.REFUNDED})

STATUS_OF_EVENT: dict[type, Status | None] = {
    Transaction.SendoutSeen: None,
    Transaction.Confirming: Status.CONFIRMING,
    Transaction.ToPayout: Status.TO_PAYOUT,
    Transaction.Blocked: Status.BLOCKED,
    Transaction.PaidLate: Status.CANCELLED,
    Transaction.Completed: Status.COMPLETED,
    Transaction.PayoutConfirming: Status.PAYOUT_CONFIRMING,
    Transaction.PaidOut: Status.COMPLETED,
}


class ReadModelsProjection(Projection[ReadModels]):
    name = "ReadModels"

    @singledispatchmethod
    def process_event(self, domain_event: Any, tracking: Tracking) -> None:
        self.view.skip(tracking)

    @process_event.register
    def _customer_registered(self, event: Customer.Registered, tracking: Tracking) -> None:
        row = {
            "partner": event.partner,
            "customer_code": event.code,
            "id": event.originator_id,
            "trust_level": event.trust_level,
            "status": str(event.status),
            "currency_code": event.currency,
            "portfolio_code": event.portfolio,
            "created": event.at,
            "updated": event.at,
            "activated": event.at if event.status == CustomerStatus.ACTIVE else None,
            "account_count": 0,
            "version": event.originator_version,
            "notification_id": tracking.notification_id,
        }
        with self.view.recording(tracking) as curs:
            self.view.register_customer(curs, row)

    @process_event.register
    def _customer_activated(self, event: Customer.Activated, tracking: Tracking) -> None:
        with self.view.recording(tracking) as curs:
            values = {"status": CustomerStatus.ACTIVE.value, "activated": event.at, "updated": event.at}
            self.view.change_customer(curs, event, tracking, **values)

    @process_event.register
    def _account_linked(self, event: Customer.AccountLinked, tracking: Tracking) -> None:
        with self.view.recording(tracking) as curs:
            count = _one_more_account
            self.view.change_customer(curs, event, tracking, account_count=count, updated=event.at)

    @process_event.register
    def _account_opened(self, event: Account.Opened, tracking: Tracking) -> None:
        row = {
            "partner": event.partner,
            "account_code": event.code,
            "id": event.originator_id,
            "customer_code": event.customer_code,
            "crypto_code": event.crypto,
            "customer_address": event.customer_address,
            "deposit_address": event.deposit_address,
            "deposit_path": event.deposit_path,
            "status": "ACTIVE",
            "created": event.at,
            "version": event.originator_version,
            "notification_id": tracking.notification_id,
        }
        with self.view.recording(tracking) as curs:
            self.view.open_account(curs, row)

    @process_event.register(Transaction.Staged)
    @process_event.register(Transaction.Initiated)
    def _transaction_created(self, event: Any, tracking: Tracking) -> None:
        row = transaction_row(event, tracking)
        with self.view.recording(tracking) as curs:
            self.view.create_transaction(curs, row, event, tracking)

    @process_event.register
    def _committed(self, event: Transaction.Committed, tracking: Tracking) -> None:
        with self.view.recording(tracking) as curs:
            self.view.change_transaction(curs, event, tracking, status=Status.SENDING, updated=event.at)

    @process_event.register(Transaction.SendoutSeen)
    @process_event.register(Transaction.Confirming)
    @process_event.register(Transaction.ToPayout)
    @process_event.register(Transaction.Blocked)
    @process_event.register(Transaction.PaidLate)
    @process_event.register(Transaction.Completed)
    def _payment_seen(self, event: Any, tracking: Tracking) -> None:
        values = {
            "updated": event.at,
            "blockchain_tx_id": event.payment.tx_id,
            "confirmations": event.payment.confirmations,
            "received_crypto_amount": event.payment.amount,
        }
        status = STATUS_OF_EVENT[type(event)]
        if status is not None:
            values["status"] = status
        if isinstance(event, Transaction.PaidLate):
            values["cancel_reason"] = "expired"
        with self.view.recording(tracking) as curs:
            self.view.change_transaction(curs, event, tracking, **values)

    @process_event.register(Transaction.PayoutConfirming)
    @process_event.register(Transaction.PaidOut)
    def _payout(self, event: Any, tracking: Tracking) -> None:
        values: dict[str, Any] = {"status": STATUS_OF_EVENT[type(event)], "updated": event.at}
        if event.reference:
            values["payout_reference"] = event.reference
        if event.bank_account_id:
            values["customer_bank_account_id"] = event.bank_account_id
        with self.view.recording(tracking) as curs:
            self.view.change_transaction(curs, event, tracking, **values)

    @process_event.register
    def _received_accepted(self, event: Transaction.ReceivedAccepted, tracking: Tracking) -> None:
        values = {
            **priced(event.order),
            "status": Status.TO_PAYOUT if event.to_payout else Status.COMPLETED,
            "updated": event.at,
            "resolution": Resolution.ACCEPT_RECEIVED,
            "resolution_reason": event.reason,
        }
        with self.view.recording(tracking) as curs:
            self.view.change_transaction(curs, event, tracking, **values)

    @process_event.register(Transaction.RefundStarted)
    @process_event.register(Transaction.RefundNotSent)
    def _refund_decided(self, event: Any, tracking: Tracking) -> None:
        started = isinstance(event, Transaction.RefundStarted)
        values = {
            "status": Status.REFUNDING if started else Status.REFUNDED,
            "updated": event.at,
            "resolution": Resolution.REFUND,
            "resolution_reason": event.reason,
            "refund_address": event.address,
            "refund_crypto_amount": event.amount if started else Decimal(0),
            "refund_network_fee": event.network_fee if started else event.kept,
        }
        with self.view.recording(tracking) as curs:
            self.view.change_transaction(curs, event, tracking, **values)

    @process_event.register(Transaction.RefundSendoutSeen)
    @process_event.register(Transaction.Refunded)
    def _refund_sendout(self, event: Any, tracking: Tracking) -> None:
        values: dict[str, Any] = {"updated": event.at, "refund_tx_id": event.payment.tx_id}
        if isinstance(event, Transaction.Refunded):
            values["status"] = Status.REFUNDED
        with self.view.recording(tracking) as curs:
            self.view.change_transaction(curs, event, tracking, **values)

    @process_event.register
    def _cancelled(self, event: Transaction.Cancelled, tracking: Tracking) -> None:
        values = {"status": Status.CANCELLED, "cancel_reason": event.reason, "updated": event.at}
        with self.view.recording(tracking) as curs:
            self.view.change_transaction(curs, event, tracking, **values)
