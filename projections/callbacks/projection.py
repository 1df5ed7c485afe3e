"""The callbacks outbox: one row per status change of a transaction that has a callback URL.

The projection keeps each transaction's state (`callback_transactions`: eventsourcing's snapshot of the
aggregate, rebuilt from the events by the domain's own handlers) and, whenever an event changes the status of
a transaction with a callback URL, inserts a delivery into `callback_outbox` in the same database transaction
as its tracking position, so a crash never loses one and never makes two:

- `event_id` is stable (`evt_` + a UUID5 of the transaction's id and version): receivers deduplicate by it;
- `sequence` counts the transaction's status changes from 1, so deliveries are sent in that order;
- `state` is the transaction as it stood after the event; the body is rendered from it at send time.

A transaction created without a callback URL (it cannot get one later: the URL is its order's) never has a
delivery. Its row in `callback_transactions` is a marker with an empty `state`, written once from its first
event; its later events are only passed over. So a platform that uses no callbacks pays no snapshot of each
transaction (`Snapshot.take` and its JSON) and no replay of it per event. Rows kept in full before stay as
they are.

The delivery columns (`status`, `attempts`, `next_attempt_at`, lease) and the tables `callback_attempts` and
`callback_endpoints` are written by the delivery worker (`delivery`, `outbox`), never by the projection.
A rebuild (`reset`) empties `callback_transactions` only: replaying the events derives the same event ids,
and an outbox row that exists already is left as it is, so a rebuild never sends a callback again.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from eventsourcing.dispatch import singledispatchmethod
from eventsourcing.persistence import Tracking
from eventsourcing.projection import Projection
from eventsourcing.utils import get_topic
from psycopg.sql import SQL, Composed

from domain.transaction import Transaction
from projections.base.json_rows import ANY_ID, as_json, json_rows
from projections.base.postgres import ReadModel
from projections.base.runner import ProjectionSpec
from projections.callbacks.outbox import CREATE, ENQUEUE, OUTBOX, STATES, tables
from projections.callbacks.snapshots import StoredState, restore, store

NO_URL = "no callback URL"  # the status column of a marker row (see the module's docstring)
EVENT_NAMESPACE = uuid.uuid5(uuid.NAMESPACE_URL, "urn:broker-ledger:callbacks")


def event_id(transaction_id: uuid.UUID, version: int) -> str:
    """The delivery's id, the same for every attempt and every rebuild: `webhook-id` for receivers."""
    return "evt_" + uuid.uuid5(EVENT_NAMESPACE, f"{transaction_id}/{version}").hex


@dataclass
class _Changes:
    """What the projection changed in a batch (or in one event outside a batch): each transaction's latest
    state, and the deliveries. A delivery carries the state of its transaction right after its event:
    encoded only when the transaction moves on in the same batch, else the one encoding of the final state
    serves both tables."""

    states: dict[uuid.UUID, tuple[Transaction, int]] = field(default_factory=dict)  # with its sequence
    silent: list[tuple[Any, ...]] = field(default_factory=list)  # rows of transactions without callbacks
    deliveries: list[list[Any]] = field(default_factory=list)
    unsettled: dict[uuid.UUID, list[Any]] = field(default_factory=dict)  # deliveries of the latest state

    def moving_on(self, transaction_id: uuid.UUID) -> None:
        """Before an event moves the transaction on: its delivery, if any, takes the state it has now."""
        delivery = self.unsettled.pop(transaction_id, None)
        if delivery is not None:
            _settle(delivery, store(self.states[transaction_id][0]))

    def deliver(self, transaction: Transaction, sequence: int, notification_id: int) -> None:
        order = transaction.order
        delivery = [
            event_id(transaction.id, transaction.version),
            order.partner,
            transaction.id,
            order.code,
            sequence,
            str(transaction.status),
            order.callback_url,
            None,  # topic, version and state: see `_settle`
            None,
            None,
            transaction.updated,
            notification_id,
        ]
        self.deliveries.append(delivery)
        self.unsettled[transaction.id] = delivery

    def rows(self) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
        """The rows of `callback_transactions` and of `callback_outbox`, each state encoded once."""
        states = []
        for transaction_id, (transaction, sequence) in self.states.items():
            stored = store(transaction)
            order = transaction.order
            status = str(transaction.status)
            encoded = (stored.version, stored.topic, stored.state)
            states.append((transaction_id, order.partner, order.code, *encoded, status, sequence))
            delivery = self.unsettled.pop(transaction_id, None)
            if delivery is not None:
                _settle(delivery, stored)
        return [*states, *self.silent], [tuple(delivery) for delivery in self.deliveries]


def _settle(delivery: list[Any], stored: StoredState) -> None:
    delivery[7:10] = stored.topic, stored.version, stored.state


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
            if _calls_back_never(event, row):
                if row is None:
                    self._keep_silent(curs, event, kept)
                return
            changes = self._changes(curs)
            changes.moving_on(event.originator_id)
            before = _aggregate(event.originator_id, row) if row else None
            status_before = before.status if before is not None else None
            after = event.mutate(before)  # the same object, moved on
            sequence = row["sequence"] if row else 0
            if after.order.callback_url and after.status != status_before:
                sequence += 1
                changes.deliver(after, sequence, tracking.notification_id)
            kept[event.originator_id] = {"aggregate": after, "sequence": sequence}
            changes.states[after.id] = (after, sequence)
            if self.kept() is None:
                self._write(changes, curs)

    def _keep_silent(self, curs: Any, event: Any, kept: dict[uuid.UUID, dict[str, Any]]) -> None:
        """The marker of a transaction created without a callback URL (`state` empty), from its first
        event: nothing else of it is ever kept."""
        order = event.order
        kept[event.originator_id] = {"state": b"", "sequence": 0}
        changes = self._changes(curs)
        marker = (event.originator_id, order.partner, order.code, 0, get_topic(Transaction), b"", NO_URL, 0)
        changes.silent.append(marker)
        if self.kept() is None:
            self._write(changes, curs)

    def _changes(self, curs: Any) -> _Changes:
        """The changes of the batch, written at its end (see `_Changes`); outside a batch, a new one."""
        kept = self.kept()
        if kept is None:
            return _Changes()
        if "changes" not in kept:
            kept["changes"] = _Changes()
            self.at_batch_end(curs, STATES, partial(self._write, kept["changes"]))
        return kept["changes"]

    def _write(self, changes: _Changes, curs: Any) -> None:
        states, deliveries = changes.rows()
        if deliveries:
            curs.execute(self.statement(("enqueue",), self._insert_deliveries), as_json(deliveries))
        curs.execute(self.statement(("keep states",), self._upsert_states), as_json(states))

    def _kept_states(self, curs: Any, transaction_id: uuid.UUID) -> dict[uuid.UUID, dict[str, Any]]:
        """The kept states by transaction id, with `transaction_id`'s if there is one (see `page_rows`:
        `apply` keeps them as it changes them, with the transaction itself: see `_aggregate`)."""
        return self.page_rows(curs, "states", self._select_states, transaction_id)

    def _select_states(self, curs: Any, ids: list[uuid.UUID]) -> dict[uuid.UUID, dict[str, Any]]:
        select = self.statement(
            ("states",),
            lambda: SQL(
                "SELECT transaction_id, version, topic, state, sequence FROM {}"
                " WHERE transaction_id = " + ANY_ID
            ).format(self.table(STATES)),
        )
        return {row["transaction_id"]: row for row in self.fetch_all(curs, select, as_json(ids))}

    def _upsert_states(self) -> Composed:
        rows = json_rows("uuid, text, text, integer, text, bytea, text, integer")
        return SQL(
            "INSERT INTO {} " + rows + " ON CONFLICT (transaction_id) "
            "DO UPDATE SET version = excluded.version, topic = excluded.topic, "
            "state = excluded.state, status = excluded.status, sequence = excluded.sequence"
        ).format(self.table(STATES))

    def _insert_deliveries(self) -> Composed:
        return SQL(ENQUEUE).format(outbox=self.table(OUTBOX))


def _calls_back_never(event: Any, row: dict[str, Any] | None) -> bool:
    """Whether the transaction of `event` was created without a callback URL: its kept row is the marker,
    or `event` creates it with an order that has none."""
    if row is not None:
        return "aggregate" not in row and not row["state"]
    order = getattr(event, "order", None)
    return order is not None and not order.callback_url


def _aggregate(transaction_id: uuid.UUID, row: dict[str, Any]) -> Transaction:
    """The transaction as a kept row holds it: the object itself if this batch moved it on, else restored
    from its stored state."""
    if "aggregate" in row:
        return row["aggregate"]
    return restore(StoredState(transaction_id, row["version"], row["topic"], row["state"]))


class CallbackOutboxProjection(Projection[CallbackOutbox]):
    """Transaction events move the kept states on; every other event only advances the position."""

    name = "CallbackOutbox"

    @singledispatchmethod
    def process_event(self, domain_event: Any, tracking: Tracking) -> None:
        self.view.skip(tracking)

    @process_event.register
    def _transaction_event(self, domain_event: Transaction.Event, tracking: Tracking) -> None:
        self.view.apply(domain_event, tracking)


# the outbox as the catalog and the callbacks service know it
CALLBACK_OUTBOX = ProjectionSpec(CallbackOutboxProjection, CallbackOutbox)
