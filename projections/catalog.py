"""Every projection of the service, in the order they are started, rebuilt and verified."""

from __future__ import annotations

from projections.audit_chain import AuditChain, AuditChainProjection
from projections.base.runner import ProjectionSpec
from projections.callbacks.projection import CALLBACK_OUTBOX
from projections.events_feed import EVENTS_FEED
from projections.ledger_postings import Postings, PostingsProjection
from projections.merkle_tree import MerkleTree, MerkleTreeProjection
from projections.read_models import ReadModels, ReadModelsProjection

PROJECTIONS: tuple[ProjectionSpec, ...] = ()
READ_MODELS = ProjectionSpec(ReadModelsProjection, ReadModels)
PROJECTIONS += (READ_MODELS,)
PROJECTIONS += (ProjectionSpec(AuditChainProjection, AuditChain),)
PROJECTIONS += (ProjectionSpec(MerkleTreeProjection, MerkleTree),)
PROJECTIONS += (ProjectionSpec(PostingsProjection, Postings),)
PROJECTIONS += (EVENTS_FEED,)
PROJECTIONS += (CALLBACK_OUTBOX,)


def by_name(name: str) -> ProjectionSpec:
    for spec in PROJECTIONS:
        if spec.name.lower() == name.lower():
            return spec
    known = ", ".join(spec.name for spec in PROJECTIONS)
    raise KeyError(f"no projection named {name!r}; known: {known}")
