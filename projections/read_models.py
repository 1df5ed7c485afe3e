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
from psycopg.sql import SQL, Composed, Identifier, Placeholder

from domain.account import Account
from domain.customer import Customer, CustomerStatus
from domain.transaction import Status, Transaction
from domain.transaction_view import transaction_view
from projections.postgres import ReadModel, columns
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

    def insert(self, curs: Cursor[DictRow], table: str, row: dict[str, Any]) -> None:
        """Inserts `row` unless its key is there already."""
        statement = self.statement(
            ("insert", table, *row),
            lambda: SQL("INSERT INTO {} ({}) VALUES ({}) ON CONFLICT DO NOTHING").format(
                self.table(table), SQL(", ").join(map(Identifier, row)), SQL(", ").join(map(Placeholder, row))
            ),
        )
        curs.execute(statement, row)

    def update(
        self, curs: Cursor[DictRow], table: str, event: DomainEvent, tracking: Tracking, **values: Any
    ) -> None:
        """Sets `values` on the aggregate's row, if the row is of an older version than the event's.
        A value may be SQL (`account_count + 1`): it is then an expression of the row's old values."""
        values = {**values, "version": event.originator_version, "notification_id": tracking.notification_id}
        shape = tuple(
            (name, value.as_string() if isinstance(value, SQL) else None) for name, value in values.items()
        )

        def compose() -> Composed:
            assignments = SQL(", ").join(
                SQL("{} = {}").format(Identifier(name), SQL(value) if value else Placeholder(name))
                for name, value in shape
            )
            return SQL("UPDATE {} SET {} WHERE id = %(id)s AND version < %(version)s").format(
                self.table(table), assignments
            )

        params = {name: value for name, value in values.items() if not isinstance(value, SQL)}
        curs.execute(
            self.statement(("update", table, *shape), compose), {**params, "id": event.originator_id}
        )

    def transactions(self, curs: Cursor[DictRow], transaction_id: UUID) -> dict[UUID, dict[str, Any]]:
        """The rows of transactions by id, with `transaction_id`'s if there is one (see `page_rows`: the
        caller keeps them as it changes them)."""
        return self.page_rows(curs, "transactions", self._select_transactions, transaction_id)

    def _select_transactions(self, curs: Cursor[DictRow], ids: list[UUID]) -> dict[UUID, dict[str, Any]]:
        select = self.statement(
            ("transactions",),
            lambda: SQL("SELECT * FROM {} WHERE id = ANY(%s) FOR UPDATE").format(self.table("transactions")),
        )
        return {row["id"]: row for row in self.fetch_all(curs, select, (ids,))}

    def create_transaction(
        self, curs: Cursor[DictRow], row: dict[str, Any], event: DomainEvent, tracking: Tracking
    ) -> None:
        """Inserts a transaction's first row, its first status and its volumes, unless it is there."""
        rows = self.transactions(curs, row["id"])
        if row["id"] in rows:
            return  # applied already (the id is derived from partner and code, the primary key)
        rows[row["id"]] = row
        self._keep_transaction(curs, row)
        self.record_status(curs, row, None, row["status"], event, tracking)
        self.add_volume(curs, row, +1)

    def change_transaction(
        self, curs: Cursor[DictRow], event: DomainEvent, tracking: Tracking, **values: Any
    ) -> None:
        """Updates a transaction's row; a change of status is added to its history and a cancellation
        takes the transaction out of the volumes."""
        rows = self.transactions(curs, event.originator_id)
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
        self._keep_transaction(curs, new)
        if status != old["status"]:
            self.record_status(curs, old, old["status"], status, event, tracking)
            if status == Status.CANCELLED:
                self.add_volume(curs, old, -1)

    def _keep_transaction(self, curs: Cursor[DictRow], row: dict[str, Any]) -> None:
        """Writes the transaction's row as it now is: in a batch, each changed row once, at its end."""
        kept = self.kept()
        changed = kept.setdefault("changed transactions", {}) if kept is not None else {}
        changed[row["id"]] = row
        self.at_batch_end(curs, "transactions", partial(self._replace_transactions, changed))

    def _replace_transactions(self, changed: dict[UUID, dict[str, Any]], curs: Cursor[DictRow]) -> None:
        """Replaces these transactions' rows by the given ones (read FOR UPDATE by `transactions`, so each
        is at least as new as the stored one): one DELETE and one INSERT of the rows as JSON records."""
        table = self.table("transactions")
        delete = self.statement(
            ("replace transactions", "delete"),
            lambda: SQL("DELETE FROM {} WHERE id = ANY(%b::uuid[])").format(table),
        )
        insert = self.statement(
            ("replace transactions", "insert"),
            lambda: SQL(
                "INSERT INTO {0} SELECT * FROM jsonb_populate_recordset(NULL::{0}, %s::jsonb)"
            ).format(table),
        )
        curs.execute(delete, (list(changed),))
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
        return SQL(
            "INSERT INTO {} SELECT * FROM unnest(%b::text[], %b::text[], %b::integer[], %b::text[],"
            " %b::text[], %b::timestamptz[], %b::text[], %b::bigint[]) ON CONFLICT DO NOTHING"
        ).format(self.table("transaction_status_history"))

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
        """Adds the summed changes to their days' rows, then drops the rows no transaction counts in."""
        rows = [(*key, *change) for key, change in changes.items() if any(change)]
        if not rows:
            return
        curs.execute(self.statement(("add volumes",), self._add_volumes), columns(rows))
        keys = columns([row[: len(VOLUME_KEY) + 1] for row in rows])
        curs.execute(self.statement(("empty volumes",), self._empty_volumes), keys)

    def _add_volumes(self) -> Composed:
        names = (*VOLUME_KEY, "day", "count", *VOLUME_SUMS)
        added = SQL(", ").join(
            SQL("{0} = v.{0} + excluded.{0}").format(Identifier(name)) for name in ("count", *VOLUME_SUMS)
        )
        return SQL(
            "INSERT INTO {} AS v ({}) SELECT * FROM unnest({}, %b::date[], %b::bigint[], {})"
            " ON CONFLICT ({}) DO UPDATE SET {}"
        ).format(
            self.table("daily_volumes"),
            SQL(", ").join(map(Identifier, names)),
            SQL(", ").join(SQL("%b::text[]") for _ in VOLUME_KEY),
            SQL(", ").join(SQL("%b::numeric[]") for _ in VOLUME_SUMS),
            SQL(", ").join(map(Identifier, (*VOLUME_KEY, "day"))),
            added,
        )

    def _empty_volumes(self) -> Composed:
        names = (*VOLUME_KEY, "day")
        return SQL(
            "DELETE FROM {} AS v USING unnest({}, %b::date[]) AS k ({}) WHERE {} AND v.count = 0"
        ).format(
            self.table("daily_volumes"),
            SQL(", ").join(SQL("%b::text[]") for _ in VOLUME_KEY),
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
            "version": event.originator_version,
            "notification_id": tracking.notification_id,
        }
        with self.view.recording(tracking) as curs:
            self.view.insert(curs, "customers", row)

    @process_event.register
    def _customer_activated(self, event: Customer.Activated, tracking: Tracking) -> None:
        with self.view.recording(tracking) as curs:
            values = {"status": CustomerStatus.ACTIVE.value, "activated": event.at, "updated": event.at}
            self.view.update(curs, "customers", event, tracking, **values)

    @process_event.register
    def _account_linked(self, event: Customer.AccountLinked, tracking: Tracking) -> None:
        with self.view.recording(tracking) as curs:
            count = SQL("account_count + 1")
            self.view.update(curs, "customers", event, tracking, account_count=count, updated=event.at)

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
            self.view.insert(curs, "accounts", row)

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
    def _cancelled(self, event: Transaction.Cancelled, tracking: Tracking) -> None:
        values = {"status": Status.CANCELLED, "cancel_reason": event.reason, "updated": event.at}
        with self.view.recording(tracking) as curs:
            self.view.change_transaction(curs, event, tracking, **values)
