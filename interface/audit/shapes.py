"""Bodies of the audit endpoints: signed checkpoints of the log's Merkle tree, the keys that sign them, and
the proofs (docs/verifying-the-log.md)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

import msgspec

from interface.http.shapes import Body

Timestamp = Annotated[datetime, msgspec.Meta(tz=True)]
Hash = Annotated[str, msgspec.Meta(pattern="^[0-9a-f]{64}$", description="a SHA-256 hash, in lowercase hex")]


class Checkpoint(Body):
    """The tree of the first `treeSize` events had the root `rootHash` at `at`: signed by key `keyId`, over
    `signedText` (`broker-ledger checkpoint v1`, the size, the root and the time, a line each)."""

    tree_size: int
    root_hash: Hash
    at: Timestamp
    key_id: Hash
    signature: str  # base64 of the 64-byte Ed25519 signature
    signed_text: str


class Checkpoints(Body):
    checkpoints: list[Checkpoint]


class SigningKey(Body):
    """A key that signs (or signed) checkpoints and manifests: its id is the SHA-256 of its raw public key."""

    key_id: Hash
    algorithm: Literal["Ed25519"]
    public_key: str  # base64 of the raw 32-byte key
    public_key_pem: str
    first_used: Timestamp


class PublicKeys(Body):
    """The key signing now (the latest), and every key that signed before it, latest first."""

    key_id: Hash
    algorithm: Literal["Ed25519"]
    public_key: str
    public_key_pem: str
    keys: list[SigningKey]


class StoredEvent(Body):
    """The event as stored: a leaf's bytes are the UTF-8 of
    `"{position}\\n{originatorId}\\n{originatorVersion}\\n{topic}\\n"` followed by the state's bytes
    (base64 here)."""

    position: int
    originator_id: str
    originator_version: int
    topic: str
    state: str


class InclusionProof(Body):
    """The audit path of the event at `position` (leaf `leafIndex`) in the tree of `treeSize` events, bottom
    up (RFC 9162, 2.1.3)."""

    position: int
    leaf_index: int
    tree_size: int
    event: StoredEvent
    leaf_hash: Hash
    audit_path: list[Hash]


class ConsistencyProof(Body):
    """That the tree of `from` events is a prefix of the tree of `to` events (RFC 9162, 2.1.4), with both
    roots."""

    from_: int = msgspec.field(name="from")
    to: int
    from_root: Hash
    to_root: Hash
    proof: list[Hash]
