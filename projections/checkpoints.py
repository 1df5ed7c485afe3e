"""Signed checkpoints of the Merkle tree: the tree's size, its root and the time, signed with the service's
audit key (`application.audit_key`), so that an auditor can later prove what the ledger said at that time.

The signed bytes of a checkpoint (docs/verifying-the-log.md), UTF-8, four lines each ending in a newline:

    broker-ledger checkpoint v1
    <tree size, decimal>
    <root hash, 64 lowercase hex digits>
    <time, UTC: YYYY-MM-DDTHH:MM:SS.ffffffZ>

and its signature is Ed25519 over them, by the key whose id (hex SHA-256 of the raw public key) it names.

`read.audit_tree_checkpoints` keeps every checkpoint made, and `read.audit_signing_keys` every public key
that signed one, so that old checkpoints stay verifiable after a rotation. Neither is a projection's table:
they are a record of signatures made at a time, not derived from the log, and no rebuild empties them (a
rebuilt tree has the same roots, so they stay valid). A checkpoint is made by the projection worker that
leads the `MerkleTree` projection (`Checkpointer`: every `every_events` new events, or once `every_seconds`
have passed since the last one if the tree grew), and by each `broker-ledger audit verify`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg
from psycopg.rows import dict_row
from psycopg.sql import SQL, Identifier

from application.audit_key import ALGORITHM, AuditKey, load_or_create_audit_key
from projections.base.postgres import READ_SCHEMA
from projections.merkle_tree import MerkleTreeProjection, root_at, tree_size
from projections.partner_policies import mapping_statements, whole_ledger_rows

CHECKPOINTS = "audit_tree_checkpoints"
CREATE_LOCK = int.from_bytes(b"CHKPOINT")  # serialises creating the tables: processes start together
KEYS = "audit_signing_keys"
HEADER = "broker-ledger checkpoint v1"
EVERY_EVENTS = 1000
EVERY_SECONDS = 60.0
LOOK_SECONDS = 1.0  # how often a worker looks whether a checkpoint is due
CREATE = (
    "CREATE TABLE IF NOT EXISTS {} (id bigserial PRIMARY KEY, tree_size bigint NOT NULL, "
    "root text NOT NULL, at timestamptz NOT NULL, key_id text NOT NULL, signature text NOT NULL)",
    "CREATE TABLE IF NOT EXISTS {} (key_id text PRIMARY KEY, algorithm text NOT NULL, "
    "public_key text NOT NULL, first_used timestamptz NOT NULL)",
)


def written_time(moment: datetime) -> str:
    """A checkpoint's time as signed: UTC, always six fraction digits, `Z`."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def signed_bytes(tree_size: int, root: str, at: datetime) -> bytes:
    return f"{HEADER}\n{tree_size}\n{root}\n{written_time(at)}\n".encode()


@dataclass(frozen=True)
class Checkpoint:
    tree_size: int
    root: str
    at: datetime
    key_id: str
    signature: str  # base64

    @property
    def body(self) -> str:
        return signed_bytes(self.tree_size, self.root, self.at).decode()


@dataclass(frozen=True)
class SigningKey:
    key_id: str
    algorithm: str
    public_key: str  # base64 of the raw key
    first_used: datetime


def _table(name: str) -> Identifier:
    return Identifier(READ_SCHEMA, name)


def create_tables(conn: psycopg.Connection[Any]) -> None:
    """The two tables, with the whole ledger's row policy (a partner's analyst sees none of their rows)."""
    statements = [
        *mapping_statements(_table),
        SQL(CREATE[0]).format(_table(CHECKPOINTS)),
        SQL(CREATE[1]).format(_table(KEYS)),
        whole_ledger_rows(_table, CHECKPOINTS),
        whole_ledger_rows(_table, KEYS),
    ]
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (CREATE_LOCK,))  # concurrent IF NOT EXISTS collide
        conn.execute(SQL("CREATE SCHEMA IF NOT EXISTS {}").format(Identifier(READ_SCHEMA)))
        for statement in statements:
            conn.execute(statement)


def register_key(conn: psycopg.Connection[Any], key: AuditKey, at: datetime) -> None:
    """Lists `key`'s public key among the signing keys (once)."""
    insert = SQL("INSERT INTO {} VALUES (%s, %s, %s, %s) ON CONFLICT (key_id) DO NOTHING").format(
        _table(KEYS)
    )
    conn.execute(insert, (key.key_id, ALGORITHM, key.public_key_base64, at))


def record_key(url: str, key: AuditKey) -> None:
    """Lists `key` among the signing keys on the database at `url` (a manifest signed outside a worker)."""
    with psycopg.connect(url, autocommit=True, connect_timeout=5) as conn:
        create_tables(conn)
        register_key(conn, key, datetime.now(UTC))


def make_checkpoint(conn: psycopg.Connection[Any], key: AuditKey, at: datetime | None = None) -> Checkpoint:
    """Signs and records a checkpoint of the tree as it is now (on `conn`, autocommit)."""
    at = at or datetime.now(UTC)
    create_tables(conn)
    with conn.transaction():
        register_key(conn, key, at)
        size = tree_size(conn)
        root = root_at(conn, size)
        signature = key.sign(signed_bytes(size, root, at))
        insert = SQL("INSERT INTO {} (tree_size, root, at, key_id, signature) VALUES (%s, %s, %s, %s, %s)")
        conn.execute(insert.format(_table(CHECKPOINTS)), (size, root, at, key.key_id, signature))
    return Checkpoint(size, root, at, key.key_id, signature)


def _rows(conn: psycopg.Connection[Any], query: str, *params: Any) -> list[dict[str, Any]]:
    try:
        with conn.transaction(), conn.cursor(row_factory=dict_row) as cursor:
            return cursor.execute(SQL(query).format(_table(CHECKPOINTS), _table(KEYS)), params).fetchall()
    except psycopg.errors.UndefinedTable:
        return []


def checkpoints(
    conn: psycopg.Connection[Any], limit: int = 100, before: int | None = None
) -> list[Checkpoint]:
    """The latest checkpoints, newest first (of a tree size below `before` when given)."""
    rows = _rows(
        conn,
        "SELECT tree_size, root, at, key_id, signature FROM {0} WHERE %s::bigint IS NULL OR tree_size < %s "
        "ORDER BY id DESC LIMIT %s",
        before,
        before,
        limit,
    )
    return [Checkpoint(**row) for row in rows]


def every_checkpoint(conn: psycopg.Connection[Any]) -> list[Checkpoint]:
    rows = _rows(conn, "SELECT tree_size, root, at, key_id, signature FROM {0} ORDER BY id")
    return [Checkpoint(**row) for row in rows]


def signing_keys(conn: psycopg.Connection[Any]) -> list[SigningKey]:
    """Every key that signed, the latest first."""
    rows = _rows(conn, "SELECT key_id, algorithm, public_key, first_used FROM {1} ORDER BY first_used DESC")
    return [SigningKey(**row) for row in rows]


class Checkpointer:
    """Makes a checkpoint when one is due (see the module), looked at by the worker leading the tree."""

    follows = MerkleTreeProjection.name  # the projection whose worker signs

    def __init__(
        self, key: AuditKey | Path, every_events: int = EVERY_EVENTS, every_seconds: float = EVERY_SECONDS
    ) -> None:
        self.source = key  # the key, or the var directory it is kept in, read at the first checkpoint
        self.every_events = every_events
        self.every_seconds = every_seconds
        self.next_look = 0.0

    @property
    def key(self) -> AuditKey:
        if isinstance(self.source, Path):  # (a runner process is handed the path, which pickles)
            self.source = load_or_create_audit_key(self.source)
        return self.source

    def look(self, conn: psycopg.Connection[Any]) -> Checkpoint | None:
        """A new checkpoint if one is due now (at most one look a `LOOK_SECONDS`), on `conn` (autocommit)."""
        now = time.monotonic()
        if now < self.next_look:
            return None
        self.next_look = now + LOOK_SECONDS
        latest = checkpoints(conn, limit=1)
        size = tree_size(conn)
        if size == 0 or (latest and size <= latest[0].tree_size):  # nothing new to sign
            return None
        if latest and size - latest[0].tree_size < self.every_events:
            age = (datetime.now(UTC) - latest[0].at).total_seconds()
            if age < self.every_seconds:
                return None
        return make_checkpoint(conn, self.key)
