"""`GET /audit/checkpoints`, `GET /audit/public-key`, `GET /audit/proof/inclusion` and
`GET /audit/proof/consistency`: what an auditor needs to verify the log without our code
(docs/verifying-the-log.md).

The tree and its checkpoints are the whole ledger's (`projections.merkle_tree`, `projections.checkpoints`):
any operator or auditor reads them, since hashes tell nothing of another partner's events. The event an
inclusion proof shows must be of the caller's partner (`projections.event_partners`); another partner's is
404 `not_found`, as an unknown position is. Sizes beyond the tree the projection has built so far are 404
`beyond_tree`, naming its size. Reads on the API's pool: a proof is one query of O(log n) subtree hashes.
"""

from __future__ import annotations

import base64
from typing import Annotated, Any

from litestar import Controller, Request, get
from litestar.di import NamedDependency
from litestar.params import QueryParameter
from psycopg import Connection
from psycopg.rows import dict_row
from psycopg_pool import ConnectionPool

from application.audit_key import public_key_pem
from application.ledger import Ledger
from interface.audit import shapes as s
from interface.http.dependencies import SettingsDep, principal
from interface.http.documented import version_header
from interface.http.problems import ApiProblem
from interface.http.security import AUDITOR, OPERATOR, authorize, roles
from projections import checkpoints as signed
from projections.audit_chain import EVENTS_TABLE, SELECT_STORED
from projections.event_partners import partner_of_aggregate
from projections.merkle import consistency_ranges, inclusion_ranges
from projections.merkle_tree import hashes, leaf_of, root_at, tree_size

MAX_SIZE = 10**15  # below 2^53: a JSON number that every client reads exactly
MOST_CHECKPOINTS = 1000
Size = Annotated[int, QueryParameter(ge=1, le=MAX_SIZE, description="a tree size: its first N events")]


def checkpoint_body(checkpoint: signed.Checkpoint) -> s.Checkpoint:
    return s.Checkpoint(
        tree_size=checkpoint.tree_size,
        root_hash=checkpoint.root,
        at=checkpoint.at,
        key_id=checkpoint.key_id,
        signature=checkpoint.signature,
        signed_text=checkpoint.body,
    )


def key_body(key: signed.SigningKey) -> s.SigningKey:
    return s.SigningKey(
        key_id=key.key_id,
        algorithm="Ed25519",
        public_key=key.public_key,
        public_key_pem=public_key_pem(base64.b64decode(key.public_key)),
        first_used=key.first_used,
    )


def within_tree(conn: Connection[Any], size: int, name: str) -> None:
    """404 `beyond_tree` when the tree holds fewer than `size` events."""
    built = tree_size(conn)
    if size > built:
        raise ApiProblem(
            404, "beyond_tree", f"{name}={size} is beyond the tree, which holds {built} events so far"
        )


def stored_event(conn: Connection[Any], position: int) -> dict[str, Any] | None:
    with conn.cursor(row_factory=dict_row) as cursor:
        return cursor.execute(SELECT_STORED.format(EVENTS_TABLE), (position,)).fetchone()


class AuditController(Controller):
    path = "/audit"
    tags = ["Audit"]
    guards = [authorize]
    opt = roles(OPERATOR, AUDITOR)
    parameters = version_header()

    @get("/checkpoints", operation_id="listCheckpoints", sync_to_thread=True)
    def list_checkpoints(
        self,
        api_pool: NamedDependency[ConnectionPool],
        limit: Annotated[int, QueryParameter(ge=1, le=MOST_CHECKPOINTS, description="how many")] = 100,
        before: Annotated[
            int | None, QueryParameter(required=False, ge=1, le=MAX_SIZE, description="of smaller trees")
        ] = None,
    ) -> s.Checkpoints:
        """The latest signed checkpoints of the log's Merkle tree, newest first (`before`: of trees smaller
        than that size)."""
        with api_pool.connection() as conn:
            found = signed.checkpoints(conn, limit, before)
        return s.Checkpoints(checkpoints=[checkpoint_body(checkpoint) for checkpoint in found])

    @get("/public-key", operation_id="getAuditPublicKey", sync_to_thread=True)
    def public_key(self, api_pool: NamedDependency[ConnectionPool]) -> s.PublicKeys:
        """The Ed25519 key that signs checkpoints and export manifests now, and every key that signed before;
        404 `not_found` before the first checkpoint."""
        with api_pool.connection() as conn:
            keys = signed.signing_keys(conn)
        if not keys:
            raise ApiProblem(
                404, "not_found", "no key has signed a checkpoint yet: the projections have not run"
            )
        latest = key_body(keys[0])
        return s.PublicKeys(
            key_id=latest.key_id,
            algorithm=latest.algorithm,
            public_key=latest.public_key,
            public_key_pem=latest.public_key_pem,
            keys=[key_body(key) for key in keys],
        )

    @get("/proof/inclusion", operation_id="getInclusionProof", sync_to_thread=True)
    def inclusion(
        self,
        request: Request,
        api_pool: NamedDependency[ConnectionPool],
        ledger: NamedDependency[Ledger],
        settings: SettingsDep,
        position: Annotated[int, QueryParameter(ge=1, le=MAX_SIZE, description="the event's position")],
        tree_size_: Annotated[
            int, QueryParameter(name="treeSize", ge=1, le=MAX_SIZE, description="tree size")
        ],
    ) -> s.InclusionProof:
        """The event at `position` as stored, and its audit path in the tree of the first `treeSize` events:
        the event must be of the caller's partner (else 404 `not_found`), in the tree and under `treeSize`
        (else 404 `beyond_tree`)."""
        partner = principal(request).partner
        with api_pool.connection() as conn:
            event = stored_event(conn, position)
            owner = None
            if event is not None:
                owner = partner_of_aggregate(conn, event["originator_id"], ledger.state_of, settings.partners)
            if event is None or owner != partner:
                raise ApiProblem(404, "not_found", f"partner {partner} has no event at position {position}")
            within_tree(conn, tree_size_, "treeSize")
            leaf = leaf_of(conn, position)
            if leaf is None or leaf[0] >= tree_size_:
                raise ApiProblem(
                    404,
                    "beyond_tree",
                    f"the event at position {position} is not among the first {tree_size_}",
                )
            path = hashes(conn, inclusion_ranges(leaf[0], tree_size_))
        return s.InclusionProof(
            position=position,
            leaf_index=leaf[0],
            tree_size=tree_size_,
            event=s.StoredEvent(
                position=position,
                originator_id=str(event["originator_id"]),
                originator_version=event["originator_version"],
                topic=event["topic"],
                state=base64.b64encode(bytes(event["state"])).decode(),
            ),
            leaf_hash=leaf[1],
            audit_path=path,
        )

    @get("/proof/consistency", operation_id="getConsistencyProof", sync_to_thread=True)
    def consistency(
        self,
        api_pool: NamedDependency[ConnectionPool],
        first: Annotated[int, QueryParameter(name="from", ge=1, le=MAX_SIZE, description="the older size")],
        second: Annotated[int, QueryParameter(name="to", ge=1, le=MAX_SIZE, description="the newer size")],
    ) -> s.ConsistencyProof:
        """The proof that the tree of the first `from` events is a prefix of the tree of the first `to`
        events (`from` <= `to`, else 404 `not_found`), with both roots; 404 `beyond_tree` past the tree's
        size."""
        if first > second:
            raise ApiProblem(
                404, "not_found", f"no proof leads from a tree of {first} events to a smaller one"
            )
        with api_pool.connection() as conn:
            within_tree(conn, second, "to")
            proof = hashes(conn, consistency_ranges(first, second))
            roots = root_at(conn, first), root_at(conn, second)
        return s.ConsistencyProof(from_=first, to=second, from_root=roots[0], to_root=roots[1], proof=proof)
