"""The audit chain: a hash chain over the event log exactly as stored, kept by a projection and checkpointed.

For the event at notification id n, with its row of `ledger.ledger_events` as stored:

    canonical(n) = f"{notification_id}\\n{originator_id}\\n{originator_version}\\n{topic}\\n" (UTF-8)
                   followed by the stored `state` bytes, unchanged
    event_hash(n) = sha256(canonical(n))
    chain_hash(n) = sha256(chain_hash(previous) || canonical(n)),  chain_hash before the first = 32 zero bytes

(hashes are hex in the tables; `||` joins the previous hash's 32 raw bytes and the canonical bytes). The
header cannot be ambiguous: ids and versions are digits or a UUID, and topics are Python paths, none of
which hold a newline; the state is whatever follows the fourth newline.

Why the stored row and not the domain event: the projection is handed decoded domain events, and encoding
one again (`mapper.to_stored_event`) only reproduces the stored bytes as long as the transcoder, the field
order and the value objects never change; a chain over re-encoded events would also hash what the code
thinks an event is, not what the database holds. So `AuditChain` hashes the row's columns exactly as the
event store returned them: those of the page of the event log being replayed (`ReadModel.notification`,
read with it), or else the row read by its notification id in the transaction that records the link. Any
later change to any column of a chained row (or its deletion) no longer matches the chain, whatever the code
does.

`read.audit_checkpoints` keeps the chain hash at every `CHECKPOINT_EVERY`-th link (periodic rows, kept
forever) and at the latest link (one row, replaced as the chain grows); `at` is the timestamp of the event
checkpointed, so a rebuild produces the same rows as the live projection.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from datetime import datetime
from functools import partial
from typing import Any
from uuid import UUID

from eventsourcing.persistence import Notification, Tracking
from eventsourcing.projection import Projection
from psycopg.sql import SQL, Composed, Identifier

from application.store.log import EVENTS_SCHEMA, LedgerLog
from projections.base.json_rows import json_rows
from projections.base.postgres import ReadModel
from projections.partner_policies import mapping_statements, whole_ledger_rows

GENESIS = "00" * 32
CHECKPOINT_EVERY = 1000
EVENTS_TABLE = Identifier(EVENTS_SCHEMA, f"{LedgerLog.name.lower()}_events")
CHAIN_TABLE = "audit_chain"
CHECKPOINTS_TABLE = "audit_checkpoints"
SELECT_STORED = SQL(
    "SELECT notification_id, originator_id, originator_version, topic, state FROM {}"
    " WHERE notification_id = %s"
)
SELECT_HEAD = SQL("SELECT seq, chain_hash FROM {} ORDER BY seq DESC LIMIT 1")


def canonical_bytes(
    notification_id: int, originator_id: UUID | str, originator_version: int, topic: str, state: bytes
) -> bytes:
    """The bytes hashed for one stored event (see the module's docstring)."""
    header = f"{notification_id}\n{originator_id}\n{originator_version}\n{topic}\n"
    return header.encode() + bytes(state)


def event_hash(canonical: bytes) -> str:
    return hashlib.sha256(canonical).hexdigest()


def link(previous_chain_hash: str, canonical: bytes) -> str:
    """The chain hash after `previous_chain_hash` of the event whose canonical bytes are given."""
    return hashlib.sha256(bytes.fromhex(previous_chain_hash) + canonical).hexdigest()


def stored_canonical(row: dict[str, Any]) -> bytes:
    """`canonical_bytes` of a row of the events table (as a dict of its columns)."""
    return canonical_bytes(
        row["notification_id"], row["originator_id"], row["originator_version"], row["topic"], row["state"]
    )


class AuditChain(ReadModel):
    """`audit_chain`: one link per event, in notification order; `audit_checkpoints`: see the module."""

    tables = (CHAIN_TABLE, CHECKPOINTS_TABLE)

    def create_statements(self) -> list[Composed]:
        return [
            *mapping_statements(self.table),
            SQL(
                "CREATE TABLE IF NOT EXISTS {} ("
                "notification_id bigint PRIMARY KEY, "
                "seq bigint NOT NULL UNIQUE, "
                "originator_id uuid NOT NULL, "
                "originator_version bigint NOT NULL, "
                "topic text NOT NULL, "
                "event_hash text NOT NULL, "
                "chain_hash text NOT NULL)"
            ).format(self.table(CHAIN_TABLE)),
            SQL(
                "CREATE TABLE IF NOT EXISTS {} ("
                "notification_id bigint PRIMARY KEY, "
                "seq bigint NOT NULL, "
                "chain_hash text NOT NULL, "
                "at timestamptz NOT NULL, "
                "periodic boolean NOT NULL)"
            ).format(self.table(CHECKPOINTS_TABLE)),
            # every partner's events: no per-partner analyst's (`projections.partner_policies`)
            whole_ledger_rows(self.table, CHAIN_TABLE),
            whole_ledger_rows(self.table, CHECKPOINTS_TABLE),
        ]

    def append(self, at: Callable[[], datetime], tracking: Tracking) -> None:
        """Links the stored event at `tracking`'s position to the chain, in one transaction with it; `at`
        tells the event's time, asked only if a checkpoint is written at it."""
        with self.recording(tracking) as curs:
            notification_id, originator_id, version, topic, state = self._stored(
                curs, tracking.notification_id
            )
            seq, previous = self._head(curs)
            seq += 1
            canonical = canonical_bytes(notification_id, originator_id, version, topic, state)
            chain_hash = link(previous, canonical)
            link_row = (
                notification_id,
                seq,
                originator_id,
                version,
                topic,
                event_hash(canonical),
                chain_hash,
            )
            self.append_row(curs, "links", self.statement(("links",), self._insert_links), link_row)
            self._checkpoint(curs, (notification_id, seq, chain_hash, at))
            kept = self.kept()
            if kept is not None:
                kept["head"] = (seq, chain_hash)

    def _stored(self, curs: Any, notification_id: int) -> tuple[int, UUID, int, str, bytes]:
        """The row of the events table at `notification_id` (its columns that `canonical_bytes` takes): as
        the batch's page holds it, or read."""
        notification = self.notification(notification_id)
        if notification is not None:
            n = notification
            return n.id, n.originator_id, n.originator_version, n.topic, n.state  # type: ignore[return-value]
        select = self.statement(("stored",), lambda: SELECT_STORED.format(EVENTS_TABLE))
        stored = self.fetch_one(curs, select, (notification_id,))
        if stored is None:
            raise LookupError(f"notification {notification_id} is not in the event log")
        return tuple(stored.values())  # type: ignore[return-value]

    def _head(self, curs: Any) -> tuple[int, str]:
        """The last link's seq and chain hash ((0, GENESIS) before the first): read once per batch."""
        kept = self.kept()
        if kept is not None and "head" in kept:
            return kept["head"]
        last = self.statement(("head",), lambda: SELECT_HEAD.format(self.table(CHAIN_TABLE)))
        head = self.fetch_one(curs, last)
        return (head["seq"], head["chain_hash"]) if head else (0, GENESIS)

    def _insert_links(self) -> Composed:
        rows = json_rows("bigint, bigint, uuid, bigint, text, text, text")
        return SQL("INSERT INTO {} " + rows).format(self.table(CHAIN_TABLE))

    def _checkpoint(self, curs: Any, values: tuple[int, int, str, Callable[[], datetime]]) -> None:
        """A periodic checkpoint is written at once; the latest one only once per batch, at its end (none
        if the batch's last link has a periodic one)."""
        latest: tuple[int, int, str, Callable[[], datetime]] | None = values
        if values[1] % CHECKPOINT_EVERY == 0:
            self._write_checkpoint(values, curs)
            latest = None
        kept = self.kept()
        if kept is None:
            if latest is not None:
                self._write_checkpoint(latest, curs)
            return
        if "latest checkpoint" not in kept:
            self.at_batch_end(curs, "latest checkpoint", partial(self._write_latest, kept))
        kept["latest checkpoint"] = latest

    def _write_latest(self, kept: dict[str, Any], curs: Any) -> None:
        if kept["latest checkpoint"] is not None:
            self._write_checkpoint(kept["latest checkpoint"], curs)

    def _write_checkpoint(self, values: tuple[int, int, str, Callable[[], datetime]], curs: Any) -> None:
        """Replaces the latest checkpoint (if not periodic) by the one of `values`."""
        checkpoints = self.table(CHECKPOINTS_TABLE)
        delete = self.statement(
            ("latest",), lambda: SQL("DELETE FROM {} WHERE NOT periodic").format(checkpoints)
        )
        insert = self.statement(
            ("checkpoint",), lambda: SQL("INSERT INTO {} VALUES (%s, %s, %s, %s, %s)").format(checkpoints)
        )
        curs.execute(delete)
        notification_id, seq, chain_hash, at = values
        curs.execute(insert, (notification_id, seq, chain_hash, at(), seq % CHECKPOINT_EVERY == 0))


class AuditChainProjection(Projection[AuditChain]):
    """Every event, whatever its type, becomes a link of the chain."""

    name = "AuditChain"

    def process_event(self, domain_event: Any, tracking: Tracking) -> None:
        self.view.append(lambda: domain_event.timestamp, tracking)

    def process_stored(self, stored: Notification, decode: Callable[[], Any], tracking: Tracking) -> None:
        """The chain links the stored row; the event is decoded only for a checkpoint's `at`."""
        self.view.append(lambda: decode().timestamp, tracking)
