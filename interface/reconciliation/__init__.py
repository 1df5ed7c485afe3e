"""The reconciliation of a partner's period (`GET /reconciliation`): its reserves rolled forward from the
postings, and its chain reports matched to their transactions and postings, with the differences; and
`FEATURE`, what the app lists of it (a heavy read)."""

from __future__ import annotations

from interface.reconciliation import shapes
from interface.reconciliation.routes import ReconciliationController
from interface.shared.feature import Feature

FEATURE = Feature(
    name="reconciliation",
    heavy_reads=[ReconciliationController],
    own_codes={
        "getReconciliation": {422: ["period_too_long"], 429: ["heavy_reads_busy"], 503: ["read_model_behind"]}
    },
    shapes=[shapes],
)
