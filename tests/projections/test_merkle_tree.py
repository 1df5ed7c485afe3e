"""The Merkle tree over the log (RFC 9162): its leaves and roots, its proofs, its signed checkpoints, and
`check_tree` finding a changed event, subtree, checkpoint or signature."""

from __future__ import annotations

import hashlib
import random
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import psycopg
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from psycopg.rows import dict_row

from application.audit_key import AuditKey, signature_valid
from projections import checkpoints as checkpoints_module
from projections.base.runner import ProjectionSpec
from projections.checkpoints import Checkpointer, make_checkpoint, signed_bytes
from projections.merkle import (
    consistency_ranges,
    consistent,
    inclusion_ranges,
    leaf_hash,
    node_hash,
    root_from_inclusion,
    split,
)
from projections.merkle_check import check_tree
from projections.merkle_tree import MerkleTree, MerkleTreeProjection, hashes, root_at, tree_size
from tests.projections.audit_support import Flows, catch_up, new_ledger, own_database, query

TREE = (ProjectionSpec(MerkleTreeProjection, MerkleTree),)
KEY = AuditKey(Ed25519PrivateKey.generate())


def tree_hash(leaves: list[str]) -> str:
    """MTH as RFC 9162 2.1.1 writes it, recursively, from the leaf hashes."""
    if len(leaves) == 1:
        return leaves[0]
    k = split(len(leaves))
    return node_hash(tree_hash(leaves[:k]), tree_hash(leaves[k:]))


def canonical(event: dict) -> bytes:
    header = f"{event['notification_id']}\n{event['originator_id']}\n{event['originator_version']}\n"
    return (header + f"{event['topic']}\n").encode() + bytes(event["state"])


@pytest.fixture(scope="module")
def two_lives(database_url: str) -> Iterator[str]:
    with own_database(database_url) as url:
        ledger = new_ledger(url)
        try:
            Flows(ledger).lives(2)
        finally:
            ledger.close()
        catch_up(url, TREE)
        yield url


@pytest.fixture
def tree(database_url: str, two_lives: str) -> Iterator[str]:
    with own_database(database_url, template=two_lives) as url:
        yield url


def connection(url: str) -> psycopg.Connection:
    return psycopg.connect(url, autocommit=True, row_factory=dict_row)


def test_each_stored_event_is_a_leaf_in_order_and_the_root_is_rfc_9162s(tree):
    events = query(tree, "SELECT * FROM ledger.ledger_events ORDER BY notification_id")
    leaves = query(tree, "SELECT * FROM read.merkle_nodes WHERE level = 0 ORDER BY idx")
    assert [leaf["notification_id"] for leaf in leaves] == [event["notification_id"] for event in events]
    expected = [hashlib.sha256(b"\x00" + canonical(event)).hexdigest() for event in events]
    assert [leaf["hash"] for leaf in leaves] == expected
    with connection(tree) as conn:
        assert tree_size(conn) == len(events)
        for size in (1, 2, 3, len(events) // 2, len(events)):
            assert root_at(conn, size) == tree_hash(expected[:size])


def test_inclusion_and_consistency_proofs_verify_and_a_changed_one_does_not(tree):
    with connection(tree) as conn:
        n = tree_size(conn)
        root = root_at(conn, n)
        leaves = [
            row["hash"]
            for row in query(tree, "SELECT hash FROM read.merkle_nodes WHERE level = 0 ORDER BY idx")
        ]
        for index in random.Random(7).sample(range(n), 10):
            path = hashes(conn, inclusion_ranges(index, n))
            assert root_from_inclusion(index, n, leaves[index], path) == root
            assert root_from_inclusion(index, n, leaf_hash(b"another event"), path) != root
            if path:
                assert root_from_inclusion(index, n, leaves[index], path[:-1]) != root
        for first in (1, 2, 5, n // 2, n - 1, n):
            proof = hashes(conn, consistency_ranges(first, n))
            assert consistent(first, n, root_at(conn, first), root, proof)
            if proof:
                forged = [*proof[:-1], leaves[0]]
                assert not consistent(first, n, root_at(conn, first), root, forged)


def test_a_checkpoint_is_signed_and_checked_and_a_changed_event_or_node_is_found(tree):
    with connection(tree) as conn:
        made = make_checkpoint(conn, KEY)
    assert made.tree_size == len(query(tree, "SELECT 1 FROM ledger.ledger_events"))
    assert signature_valid(KEY.public_key, made.signature, made.body.encode())
    assert (
        made.body == f"broker-ledger checkpoint v1\n{made.tree_size}\n{made.root}\n{made.body.split()[-1]}\n"
    )
    assert check_tree(tree).status == "OK", check_tree(tree).details
    victim = query(tree, "SELECT notification_id FROM ledger.ledger_events ORDER BY notification_id")[3]
    query(
        tree,
        "UPDATE ledger.ledger_events SET state = state || '\\x20'::bytea WHERE notification_id = %s",
        victim["notification_id"],
    )
    found = check_tree(tree)
    assert found.status == "FAILED"
    assert "node (0, 3)" in found.details[0]
    assert any(f"checkpoint of size {made.tree_size}" in detail for detail in found.details)


def test_a_changed_subtree_fails_the_check(tree):
    query(tree, "UPDATE read.merkle_nodes SET hash = md5('x') || md5('y') WHERE level = 1 AND idx = 2")
    found = check_tree(tree)
    assert found.status == "FAILED" and "node (1, 2)" in found.details[0]


def test_a_forged_root_or_signature_of_a_checkpoint_fails_the_check(tree):
    with connection(tree) as conn:
        make_checkpoint(conn, KEY)
        make_checkpoint(conn, KEY)
    query(tree, "UPDATE read.audit_tree_checkpoints SET root = md5('a') || md5('b') WHERE id = 1")
    query(tree, "UPDATE read.audit_tree_checkpoints SET signature = %s WHERE id = 2", KEY.sign(b"other"))
    found = check_tree(tree)
    assert found.status == "FAILED"
    assert any("root" in detail and "recomputed" in detail for detail in found.details)
    assert any("signature is not valid" in detail for detail in found.details)


def test_a_checkpoint_is_due_after_n_events_or_t_seconds_if_the_tree_grew(tree, monkeypatch):
    monkeypatch.setattr(checkpoints_module, "LOOK_SECONDS", 0.0)
    with connection(tree) as conn:
        size = tree_size(conn)
        checkpointer = Checkpointer(KEY, every_events=5, every_seconds=3600)
        first = checkpointer.look(conn)
        assert first is not None and first.tree_size == size
        assert checkpointer.look(conn) is None  # the tree has not grown
        conn.execute("UPDATE read.audit_tree_checkpoints SET tree_size = %s", (size - 4,))
        assert checkpointer.look(conn) is None  # 4 events since the last: not yet
        conn.execute("UPDATE read.audit_tree_checkpoints SET tree_size = %s", (size - 5,))
        made = checkpointer.look(conn)
        assert made is not None and made.tree_size == size
        every_minute = Checkpointer(KEY, every_events=1000, every_seconds=60)
        conn.execute("UPDATE read.audit_tree_checkpoints SET tree_size = tree_size - 1")
        assert every_minute.look(conn) is None
        old = datetime.now(UTC) - timedelta(seconds=61)
        conn.execute("UPDATE read.audit_tree_checkpoints SET at = %s", (old,))
        assert every_minute.look(conn) is not None


def test_the_signed_bytes_are_the_documented_four_lines():
    at = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
    assert signed_bytes(7, "ab" * 32, at) == (
        b"broker-ledger checkpoint v1\n7\n" + b"ab" * 32 + b"\n2026-03-01T12:00:00.000000Z\n"
    )


def test_proofs_of_a_tree_of_100000_events_take_milliseconds(database_url):
    n = 100_000
    level = [leaf_hash(i.to_bytes(8, "big")) for i in range(n)]
    rows = []
    for height in range(17):
        rows += [(height, idx, h, idx if height == 0 else None) for idx, h in enumerate(level)]
        level = [node_hash(level[i], level[i + 1]) for i in range(0, len(level) - 1, 2)]
    with own_database(database_url) as url:
        catch_up(url, TREE)  # the empty tree's table
        with connection(url) as conn:
            with conn.cursor().copy(
                "COPY read.merkle_nodes (level, idx, hash, notification_id) FROM STDIN"
            ) as copy:
                for row in rows:
                    copy.write_row(row)
            started = time.perf_counter()
            root = root_at(conn, n)
            path = hashes(conn, inclusion_ranges(54_321, n))
            proof = hashes(conn, consistency_ranges(77_777, n))
            took = time.perf_counter() - started
            assert root_from_inclusion(54_321, n, rows[54_321][2], path) == root
            assert consistent(77_777, n, root_at(conn, 77_777), root, proof)
    assert took < 0.1, f"{took * 1000:.1f} ms"
