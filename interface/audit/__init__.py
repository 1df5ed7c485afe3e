"""The log anyone can verify: the Merkle tree's signed checkpoints, the keys that sign them and the inclusion
and consistency proofs (`GET /audit/...`); and `FEATURE`, what the app lists of it."""

from __future__ import annotations

from interface.audit import shapes
from interface.audit.routes import AuditController
from interface.shared.feature import Feature

FEATURE = Feature(
    name="audit",
    route_handlers=[AuditController],
    own_codes={
        "getAuditPublicKey": {404: ["not_found"]},
        "getInclusionProof": {404: ["not_found", "beyond_tree"]},
        "getConsistencyProof": {404: ["not_found", "beyond_tree"]},
    },
    shapes=[shapes],
)
