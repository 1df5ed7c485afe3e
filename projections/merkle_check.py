"""Check (d) of `audit verify`: the Merkle tree and its signed checkpoints against the event log as stored.

One REPEATABLE READ snapshot rebuilds the tree from the log's rows in notification order, beside the stored
nodes in the order the tree completes them (leaf i, then each subtree it completes): a stored leaf whose
event is gone (or another event in its place), a leaf or a subtree whose hash differs from the one recomputed,
is named. Every checkpoint's root must be the recomputed tree's root at its size, and its signature valid
under the key it names (`read.audit_signing_keys`); a checkpoint of a size the tree never had is named too.
Events after the tree's last leaf are not in it yet (the projection is behind): counted, not judged.
"""

from __future__ import annotations

import base64
from collections import defaultdict
from collections.abc import Iterator
from typing import Any

from psycopg.sql import SQL, Identifier

from application.audit_key import signature_valid
from projections.audit_chain import EVENTS_TABLE, stored_canonical
from projections.audit_chain_check import MAX_LISTED, _stream
from projections.audit_sql import FAILED, OK, Check, Connection, snapshot, table_exists
from projections.base.postgres import READ_SCHEMA
from projections.checkpoints import Checkpoint, every_checkpoint, signed_bytes, signing_keys
from projections.merkle import EMPTY_ROOT, leaf_hash, node_hash
from projections.merkle_tree import NODES_TABLE

NAME = "merkle tree"


class TreeWalk:
    """The tree recomputed leaf by leaf, with what differs from the stored one."""

    def __init__(self, events: Iterator[dict[str, Any]], checkpoints: list[Checkpoint]) -> None:
        self.events = events
        self.event = next(events, None)
        self.edge: list[tuple[int, str]] = []  # (level, hash), largest first
        self.size = 0
        self.completed: dict[tuple[int, int], str] = {}
        self.roots: dict[int, list[Checkpoint]] = defaultdict(list)
        for checkpoint in checkpoints:
            self.roots[checkpoint.tree_size].append(checkpoint)
        self.problems: list[str] = []
        self._check_roots()  # those of the empty tree

    def leaf(self, notification_id: int) -> str:
        """The recomputed hash of the leaf of `notification_id` ('' if the log lacks that event)."""
        while self.event is not None and self.event["notification_id"] < notification_id:
            self.problems.append(f"notification {self.event['notification_id']}: in the log, not in the tree")
            self.event = next(self.events, None)
        if self.event is None or self.event["notification_id"] != notification_id:
            self.problems.append(f"leaf {self.size} (notification {notification_id}): its event is gone")
            return ""
        found, self.event = leaf_hash(stored_canonical(self.event)), next(self.events, None)
        return found

    def add(self, row: dict[str, Any]) -> None:
        level, idx = row["level"], row["idx"]
        if level == 0:
            self._append(row["notification_id"], idx)
        recomputed = self.completed.pop((level, idx), None)
        if recomputed is None:
            self.problems.append(f"node ({level}, {idx}): stored, but no such subtree of the log")
        elif recomputed != row["hash"]:
            self.problems.append(f"node ({level}, {idx}): {row['hash']} stored, {recomputed} recomputed")

    def _append(self, notification_id: int, idx: int) -> None:
        if idx != self.size:
            self.problems.append(f"leaf {self.size} is missing (the next stored is {idx})")
            self.size = idx
        carry = (0, self.leaf(notification_id) or "00" * 32)
        self.completed[(0, self.size)] = carry[1]
        while self.edge and self.edge[-1][0] == carry[0]:
            level, left = self.edge.pop()
            carry = (level + 1, node_hash(left, carry[1]))
            self.completed[(level + 1, self.size >> (level + 1))] = carry[1]
        self.edge.append(carry)
        self.size += 1
        self._check_roots()

    def root(self) -> str:
        if not self.edge:
            return EMPTY_ROOT
        folded = self.edge[-1][1]
        for _, left in reversed(self.edge[:-1]):
            folded = node_hash(left, folded)
        return folded

    def _check_roots(self) -> None:
        for checkpoint in self.roots.pop(self.size, []):
            if checkpoint.root != self.root():
                self.problems.append(
                    f"checkpoint of size {self.size} at {checkpoint.body.splitlines()[3]}: root "
                    f"{checkpoint.root} signed, {self.root()} recomputed from the log"
                )


def check_tree(url: str) -> Check:
    """Check (d): see the module's docstring."""
    with snapshot(url) as conn:
        if not table_exists(conn, READ_SCHEMA, NODES_TABLE):
            return Check(
                NAME, FAILED, [f"{READ_SCHEMA}.{NODES_TABLE} is missing: run the MerkleTree projection"]
            )
        signed = every_checkpoint(conn)
        problems = bad_signatures(conn, signed)
        events = _stream(
            conn,
            "tree_events",
            SQL("SELECT notification_id, originator_id, originator_version, topic, state FROM {} ORDER BY 1"),
            EVENTS_TABLE,
        )
        walk = TreeWalk(events, signed)
        order = "ORDER BY ((idx + 1) << level), level"
        nodes = _stream(
            conn, "tree_nodes", SQL("SELECT * FROM {} " + order), Identifier(READ_SCHEMA, NODES_TABLE)
        )
        for row in nodes:
            walk.add(row)
        behind = 0
        while walk.event is not None:
            behind, walk.event = behind + 1, next(events, None)
    problems += walk.problems + [f"node {node}: missing from the stored tree" for node in walk.completed]
    problems += [f"checkpoint of size {size}: the tree never had that size" for size in sorted(walk.roots)]
    return _report(walk, len(signed), behind, problems)


def bad_signatures(conn: Connection, signed: list[Checkpoint]) -> list[str]:
    keys = {key.key_id: base64.b64decode(key.public_key) for key in signing_keys(conn)}
    problems = []
    for checkpoint in signed:
        key = keys.get(checkpoint.key_id)
        message = signed_bytes(checkpoint.tree_size, checkpoint.root, checkpoint.at)
        if key is None:
            problems.append(f"checkpoint of size {checkpoint.tree_size}: key {checkpoint.key_id} is unknown")
        elif not signature_valid(key, checkpoint.signature, message):
            problems.append(f"checkpoint of size {checkpoint.tree_size}: its signature is not valid")
    return problems


def _report(walk: TreeWalk, signed: int, behind: int, problems: list[str]) -> Check:
    if problems:
        listed = problems[:MAX_LISTED]
        more = len(problems) - len(listed)
        return Check(
            NAME,
            FAILED,
            [f"first mismatch: {listed[0]}", *listed[1:], *([f"... and {more} more"] if more else [])],
        )
    details = [
        f"{walk.size} leaves and their subtrees recomputed from the log, all equal; "
        f"{signed} signed checkpoints match and their signatures are valid",
        f"tree head: size {walk.size}, root {walk.root()}",
    ]
    if behind:
        details.append(f"{behind} events after the tree's last leaf are not in it yet")
    return Check(NAME, OK, details)
