"""The `MerkleTree` projection: the RFC 9162 Merkle tree over the event log as stored (`projections.merkle`),
kept as the hash of every perfect subtree, and the reads that make roots and proofs of it.

`read.merkle_nodes` holds one row per perfect subtree: (level, idx) is the subtree of the 2^level leaves
from idx * 2^level on; level 0 is a leaf, which also names its event (`notification_id`). An event appended
as leaf i adds its leaf and every subtree it completes (as many as the trailing ones of i), computed from the
tree's right edge (one perfect subtree per binary digit of the size), which a page reads once and keeps.
Rows are only ever added, so the tree of any earlier size is still there: its root, and its proofs.

Like the audit chain it hashes the stored row (see `projections.audit_chain` for why): the page's, or else
the row read by its notification id in the transaction that records the leaf.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import psycopg
from eventsourcing.persistence import Notification, Tracking
from eventsourcing.projection import Projection
from psycopg.rows import dict_row
from psycopg.sql import SQL, Composed, Identifier

from projections.audit_chain import EVENTS_TABLE, SELECT_STORED, canonical_bytes
from projections.base.json_rows import json_rows
from projections.base.postgres import READ_SCHEMA, ReadModel
from projections.merkle import EMPTY_ROOT, Node, Range, hashes_of, leaf_hash, node_hash, parts
from projections.partner_policies import mapping_statements, whole_ledger_rows

NODES_TABLE = "merkle_nodes"
Frontier = list[tuple[int, int, str]]  # the right edge's perfect subtrees, largest first: (level, idx, hash)


class MerkleTree(ReadModel):
    """`merkle_nodes`: see the module."""

    tables = (NODES_TABLE,)

    def create_statements(self) -> list[Composed]:
        return [
            *mapping_statements(self.table),
            SQL(
                "CREATE TABLE IF NOT EXISTS {} ("
                "level smallint NOT NULL, "
                "idx bigint NOT NULL, "
                "hash text NOT NULL, "
                "notification_id bigint UNIQUE, "
                "PRIMARY KEY (level, idx))"
            ).format(self.table(NODES_TABLE)),
            whole_ledger_rows(self.table, NODES_TABLE),  # hashes of every partner's events
        ]

    def append(self, tracking: Tracking) -> None:
        """Adds the stored event at `tracking`'s position as the next leaf, in one transaction with it."""
        with self.recording(tracking) as curs:
            canonical = canonical_bytes(*self._stored(curs, tracking.notification_id))
            size, frontier = self._edge(curs)
            carry = (0, size, leaf_hash(canonical))
            rows: list[tuple[Any, ...]] = [(*carry, tracking.notification_id)]
            while frontier and frontier[-1][0] == carry[0]:
                level, _, left = frontier.pop()
                carry = (level + 1, carry[1] >> 1, node_hash(left, carry[2]))
                rows.append((*carry, None))
            frontier.append(carry)
            insert = self.statement(("nodes",), self._insert_nodes)
            for row in rows:
                self.append_row(curs, "nodes", insert, row)
            kept = self.kept()
            if kept is not None:
                kept["edge"] = (size + 1, frontier)

    def _stored(self, curs: Any, notification_id: int) -> tuple[Any, ...]:
        notification = self.notification(notification_id)
        if notification is not None:
            n = notification
            return n.id, n.originator_id, n.originator_version, n.topic, n.state
        select = self.statement(("stored",), lambda: SELECT_STORED.format(EVENTS_TABLE))
        stored = self.fetch_one(curs, select, (notification_id,))
        if stored is None:
            raise LookupError(f"notification {notification_id} is not in the event log")
        return tuple(stored.values())

    def _edge(self, curs: Any) -> tuple[int, Frontier]:
        """The tree's size and right edge: kept by the batch, or read (once per batch)."""
        kept = self.kept()
        if kept is not None and "edge" in kept:
            return kept["edge"]
        size_query = self.statement(("size",), lambda: SQL(SIZE).format(self.table(NODES_TABLE)))
        found = self.fetch_one(curs, size_query)
        size = found["size"] if found else 0
        edge = parts(0, size)
        select = self.statement(("edge",), lambda: SQL(SELECT_NODES).format(self.table(NODES_TABLE)))
        stored = {(r["level"], r["idx"]): r["hash"] for r in self.fetch_all(curs, select, node_keys(edge))}
        return size, [(level, idx, stored[(level, idx)]) for level, idx in edge]

    def _insert_nodes(self) -> Composed:
        return SQL("INSERT INTO {} " + json_rows("smallint, bigint, text, bigint")).format(
            self.table(NODES_TABLE)
        )


class MerkleTreeProjection(Projection[MerkleTree]):
    """Every event, whatever its type, becomes the tree's next leaf."""

    name = "MerkleTree"

    def process_event(self, domain_event: Any, tracking: Tracking) -> None:
        self.view.append(tracking)

    def process_stored(self, stored: Notification, decode: Callable[[], Any], tracking: Tracking) -> None:
        self.view.append(tracking)


SIZE = "SELECT coalesce(max(idx) + 1, 0) AS size FROM {} WHERE level = 0"
SELECT_NODES = (
    "SELECT level, idx, hash FROM {} WHERE (level, idx) IN "
    "(SELECT * FROM unnest(%s::smallint[], %s::bigint[]))"
)


def node_keys(nodes: Any) -> tuple[list[int], list[int]]:
    nodes = list(nodes)
    return [level for level, _ in nodes], [idx for _, idx in nodes]


# The reads of the tree, on any connection (a proof's nodes in one query)


def _table() -> Identifier:
    return Identifier(READ_SCHEMA, NODES_TABLE)


def tree_size(conn: psycopg.Connection[Any]) -> int:
    """How many events the tree holds (0 when the projection has not made its table yet)."""
    try:
        with conn.transaction(), conn.cursor(row_factory=dict_row) as cursor:
            row = cursor.execute(SQL(SIZE).format(_table())).fetchone()
    except psycopg.errors.UndefinedTable:
        return 0
    return row["size"] if row else 0


def fetcher(conn: psycopg.Connection[Any]) -> Callable[[set[Node]], dict[Node, str]]:
    def fetch(nodes: set[Node]) -> dict[Node, str]:
        if not nodes:
            return {}
        with conn.cursor(row_factory=dict_row) as cursor:
            rows = cursor.execute(SQL(SELECT_NODES).format(_table()), node_keys(nodes)).fetchall()
        return {(row["level"], row["idx"]): row["hash"] for row in rows}

    return fetch


def hashes(conn: psycopg.Connection[Any], ranges: list[Range]) -> list[str]:
    """The hashes of the tree's nodes `ranges`, read in one query."""
    return hashes_of(ranges, fetcher(conn))


def root_at(conn: psycopg.Connection[Any], size: int) -> str:
    """The root of the tree of the first `size` events (at most the tree's size)."""
    return hashes(conn, [(0, size)])[0] if size else EMPTY_ROOT


def leaf_of(conn: psycopg.Connection[Any], notification_id: int) -> tuple[int, str] | None:
    """(leaf index, leaf hash) of the event at `notification_id`; None if the tree has no such leaf."""
    query = SQL("SELECT idx, hash FROM {} WHERE notification_id = %s").format(_table())
    with conn.cursor(row_factory=dict_row) as cursor:
        row = cursor.execute(query, (notification_id,)).fetchone()
    return (row["idx"], row["hash"]) if row else None
