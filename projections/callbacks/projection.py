"""The callbacks outbox: one row per status change of a transaction that has a callback URL.

The projection keeps each transaction's state (`callback_transactions`: eventsourcing's snapshot of the
aggregate, rebuilt from the events by the domain's own handlers) and, whenever an event changes the status of
a transaction with a callback URL, inserts a delivery into `callback_outbox` in the same database transaction
as its tracking position, so a crash never loses one and never makes two:

- `event_id` is stable (`evt_` + a UUID5 of the transaction's id and version): receivers deduplicate by it;
- `sequence` counts the transaction's status changes from 1, so deliveries are sent in that order;
- `state` is the transaction as it stood after the event; the body is rendered from it at send time.

The delivery columns (`status`, `attempts`, `next_attempt_at`, lease) and the tables `callback_attempts` and
`callback_endpoints` are written by the delivery worker (`delivery`, `outbox`), never by the projection.
A rebuild (`reset`) empties `callback_transactions` only: replaying the events derives the same event ids,
and an outbox row that exists already is left as it is, so a rebuild never sends a callback again.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from eventsourcing.dispatch import singledispatchmethod
from eventsourcing.persistence import Tracking
from eventsourcing.projection import Projection
from psycopg.sql import SQL, Composed

from domain.transaction import Transaction
from projections.callbacks.outbox import CREATE, ENQUEUE, OUTBOX, STATES, tables
from projections.callbacks.snapshots import StoredState, restore, store
from projections.postgres import ReadModel

EVENT_NAMESPACE = uuid.uuid5(uuid.NAMESPACE_URL, "urn:broker-ledger:callbacks")


def event_id(transaction_id: uuid.UUID, version: int) -> str:
    """The delivery's id, the same for every attempt and every rebuild: `webhook-id` for receivers."""
    return "evt_" + uuid.uuid5(EVENT_NAMESPACE, f"{transaction_id}/{version}").hex


class CallbackOutbox(ReadModel):
    tables = (STATES,)  # see the module's docstring: a rebuild keeps the outbox and its delivery history

    def create_statements(self) -> list[Composed]:
        names = tables(self.datastore.schema)
        return [SQL(statement).format(**names) for statement in CREATE]

    def apply(self, event: Any, tracking: Tracking) -> None:
        """Moves the transaction's state on by `event`; a status change with a URL becomes a delivery."""
        with self.recording(tracking) as curs:
            kept = self._kept_states(curs, event.originator_id)
            row = kept.get(event.originator_id)
            before = restore(StoredState(event.originator_id, **_state_of(row))) if row else None
            status_before = before.status if before is not None else None
            after = event.mutate(before)  # the same object, moved on
            stored = store(after)
            sequence = row["sequence"] if row else 0
            url = after.order.callback_url
            if url and after.status != status_before:
                sequence += 1
                self._enqueue(curs, tracking, after, stored, sequence, after.updated)
            values = (
                after.id,
                after.order.partner,
                after.order.code,
                stored.version,
                stored.topic,
                stored.state,
                str(after.status),
                sequence,
            )
            upsert = self.statement(("keep states",), self._upsert_states)
            self.keep_row(curs, STATES, upsert, after.id, values)
            kept[event.originator_id] = {
                "version": stored.version,
                "topic": stored.topic,
                "state": stored.state,
                "sequence": sequence,
            }

    def _kept_states(self, curs: Any, transaction_id: uuid.UUID) -> dict[uuid.UUID, dict[str, Any]]:
        """The kept states by transaction id, with `transaction_id`'s if there is one (see `page_rows`:
        `apply` keeps them as it changes them)."""
        return self.page_rows(curs, "states", self._select_states, transaction_id)

    def _select_states(self, curs: Any, ids: list[uuid.UUID]) -> dict[uuid.UUID, dict[str, Any]]:
        select = self.statement(
            ("states",),
            lambda: SQL(
                "SELECT transaction_id, version, topic, state, sequence FROM {}"
                " WHERE transaction_id = ANY(%s)"
            ).format(self.table(STATES)),
        )
        return {row["transaction_id"]: row for row in self.fetch_all(curs, select, (ids,))}

    def _upsert_states(self) -> Composed:
        return SQL(
            "INSERT INTO {} SELECT * FROM unnest(%b::uuid[], %b::text[], %b::text[], %b::integer[],"
            " %b::text[], %b::bytea[], %b::text[], %b::integer[]) ON CONFLICT (transaction_id) "
            "DO UPDATE SET version = excluded.version, topic = excluded.topic, "
            "state = excluded.state, status = excluded.status, sequence = excluded.sequence"
        ).format(self.table(STATES))

    def _enqueue(
        self,
        curs: Any,
        tracking: Tracking,
        after: Transaction,
        stored: StoredState,
        sequence: int,
        at: datetime,
    ) -> None:
        curs.execute(
            self.statement(("enqueue",), self._insert_delivery),
            (
                event_id(after.id, after.version),
                after.order.partner,
                after.id,
                after.order.code,
                sequence,
                str(after.status),
                after.order.callback_url,
                stored.topic,
                stored.version,
                stored.state,
                at,
                tracking.notification_id,
            ),
        )

    def _insert_delivery(self) -> Composed:
        return SQL(ENQUEUE).format(outbox=self.table(OUTBOX))


def _state_of(row: dict[str, Any]) -> dict[str, Any]:
    return {"version": row["version"], "topic": row["topic"], "state": row["state"]}


class CallbackOutboxProjection(Projection[CallbackOutbox]):
    """Transaction events move the kept states on; every other event only advances the position."""

    name = "CallbackOutbox"

    @singledispatchmethod
    def process_event(self, domain_event: Any, tracking: Tracking) -> None:
        self.view.skip(tracking)

    @process_event.register
    def _transaction_event(self, domain_event: Transaction.Event, tracking: Tracking) -> None:
        self.view.apply(domain_event, tracking)
