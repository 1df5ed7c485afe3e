"""The Merkle tree of the event log, as RFC 9162 (Certificate Transparency 2.0) defines it: the hashing, the
proofs from stored subtree hashes, and their verification.

Leaves are the log's events in position (notification id) order: leaf i is the i-th event chained, counted
from 0. Its bytes are the stored event's canonical bytes, the same the audit chain hashes
(`projections.audit_chain.canonical_bytes`):

    leaf(e)   = f"{notification_id}\\n{originator_id}\\n{originator_version}\\n{topic}\\n" (UTF-8) || state
    leaf_hash = SHA-256(0x00 || leaf(e))
    node_hash = SHA-256(0x01 || left || right)

and the hash of n > 1 leaves splits them at k, the largest power of two smaller than n: MTH(D[n]) =
node_hash(MTH(D[0:k]), MTH(D[k:n])) (RFC 9162, 2.1.1). The tree of an empty log is SHA-256 of nothing.

Every node of such a tree is either a perfect subtree (2^level leaves, starting at a multiple of 2^level)
or ends at the tree's right edge; a right-edge node of m leaves is the perfect subtrees of m's binary digits,
largest first, folded from the right (`parts`, `range_hash`). The `MerkleTree` projection keeps the hash of
every perfect subtree as the log grows (`projections.merkle_tree`), so any root, inclusion proof or
consistency proof takes O(log n) subtree hashes, read in one query: milliseconds for any size of log.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping, Sequence

Node = tuple[
    int, int
]  # (level, index): the perfect subtree of leaves [index * 2^level, (index + 1) * 2^level)
Range = tuple[int, int]  # leaves [start, end)
EMPTY_ROOT = hashlib.sha256(b"").hexdigest()


def leaf_hash(leaf: bytes) -> str:
    return hashlib.sha256(b"\x00" + leaf).hexdigest()


def node_hash(left: str, right: str) -> str:
    return hashlib.sha256(b"\x01" + bytes.fromhex(left) + bytes.fromhex(right)).hexdigest()


def split(n: int) -> int:
    """The largest power of two smaller than n (n > 1)."""
    return 1 << ((n - 1).bit_length() - 1)


def parts(start: int, end: int) -> list[Node]:
    """The perfect subtrees whose hashes make the node [start, end) of a tree (a perfect subtree, or one
    at the tree's right edge), largest first."""
    found: list[Node] = []
    position, size = start, end - start
    for level in range(size.bit_length() - 1, -1, -1):
        if size >> level & 1:
            found.append((level, position >> level))
            position += 1 << level
    return found


def range_hash(start: int, end: int, hashes: Mapping[Node, str]) -> str:
    """MTH of the node [start, end), from the hashes of its `parts`."""
    found = [hashes[node] for node in parts(start, end)]
    folded = found[-1]
    for left in reversed(found[:-1]):
        folded = node_hash(left, folded)
    return folded


def inclusion_ranges(m: int, n: int) -> list[Range]:
    """The nodes whose hashes are the audit path of leaf m in the tree of n leaves, bottom up (PATH,
    RFC 9162 2.1.3.1)."""
    path: list[Range] = []
    start, end = 0, n
    while end - start > 1:
        k = split(end - start)
        if m < start + k:
            path.append((start + k, end))
            end = start + k
        else:
            path.append((start, start + k))
            start += k
    return path[::-1]


def consistency_ranges(m: int, n: int) -> list[Range]:
    """The nodes whose hashes prove the tree of m leaves a prefix of the tree of n leaves, 0 < m <= n,
    in the proof's order (SUBPROOF, RFC 9162 2.1.4.1)."""
    proof: list[Range] = []
    start, end, whole = 0, n, True
    while m != end - start:
        k = split(end - start)
        if m <= k:
            proof.append((start + k, end))
            end = start + k
        else:
            proof.append((start, start + k))
            m -= k
            start += k
            whole = False
    if not whole:
        proof.append((start, end))
    return proof[::-1]


def needed(ranges: Sequence[Range]) -> set[Node]:
    return {node for start, end in ranges for node in parts(start, end)}


def hashes_of(ranges: Sequence[Range], fetch: Callable[[set[Node]], Mapping[Node, str]]) -> list[str]:
    """The hashes of `ranges`, from the stored perfect subtrees `fetch` reads (all in one call)."""
    stored = fetch(needed(ranges))
    return [range_hash(start, end, stored) for start, end in ranges]


def root_from_inclusion(index: int, size: int, leaf: str, path: Sequence[str]) -> str | None:
    """The root that `path` proves leaf `index` of `size` leaves under (RFC 9162 2.1.3.2), or None if the
    path has the wrong length."""
    if index >= size:
        return None
    fn, sn, r = index, size - 1, leaf
    for p in path:
        if sn == 0:
            return None
        if fn & 1 or fn == sn:
            r = node_hash(p, r)
            while not fn & 1 and fn:
                fn, sn = fn >> 1, sn >> 1
        else:
            r = node_hash(r, p)
        fn, sn = fn >> 1, sn >> 1
    return r if sn == 0 else None


def consistent(first: int, second: int, first_root: str, second_root: str, proof: Sequence[str]) -> bool:
    """Whether `proof` proves the tree of `first` leaves (root `first_root`) a prefix of the tree of
    `second` leaves (root `second_root`) (RFC 9162 2.1.4.2)."""
    if first == second:
        return not proof and first_root == second_root
    if not 0 < first < second or not proof:
        return first == 0 and not proof
    path = list(proof)
    if first & (first - 1) == 0:  # a power of two: the first tree is a node of the second
        path.insert(0, first_root)
    fn, sn = first - 1, second - 1
    while fn & 1:
        fn, sn = fn >> 1, sn >> 1
    fr = sr = path[0]
    for c in path[1:]:
        if sn == 0:
            return False
        if fn & 1 or fn == sn:
            fr, sr = node_hash(c, fr), node_hash(c, sr)
            while not fn & 1 and fn:
                fn, sn = fn >> 1, sn >> 1
        else:
            sr = node_hash(sr, c)
        fn, sn = fn >> 1, sn >> 1
    return sn == 0 and fr == first_root and sr == second_root
