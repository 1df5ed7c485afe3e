"""The partner's reserves and the operator's adjustments: routes, shapes and presenters, and `FEATURE`, what
the app lists of them (their routes are heavy reads: the reserves `asOf`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from application.commands import AdjustmentRequest
from application.use_cases import UseCases
from domain import errors as e
from interface.reserves import shapes
from interface.reserves.routes import ReserveController
from interface.reserves.shapes import ReserveAdjustmentCreate
from interface.shared.feature import Feature
from interface.shared.refusals import AMOUNT, DomainErrors

ADJUSTMENT: DomainErrors = (
    *AMOUNT,
    e.ValidationFailed,
    e.AssetUnknown,
    e.ReserveTypeUnknown,
    e.ReserveTypeMismatch,
    e.ReserveCannotHoldAsset,
    e.ReserveAdjustmentShapeInvalid,
    e.ReserveMoveToSameReserve,
    e.ReserveAdjustmentConflict,
    e.InsufficientReserve,
)


def _reserve_adjustment(
    use_cases: UseCases, _: str, fields: Mapping[str, Any], unread: frozenset[str]
) -> list[e.DomainError]:
    to, source = fields.get("toReserve"), fields.get("fromReserve")
    request = AdjustmentRequest(
        kind=fields.get("kind"),
        asset_code=fields.get("code"),
        amount=fields.get("amount"),
        to_reserve=to.name if to else None,
        to_type=to.type if to else None,
        from_reserve=source.name if source else None,
        from_type=source.type if source else None,
    )
    return use_cases.reserves.adjustment_problems(request, unread)


FEATURE = Feature(
    name="reserves",
    heavy_reads=[ReserveController],
    body_checks={ReserveAdjustmentCreate: _reserve_adjustment},
    problem_codes={"createReserveAdjustment": ADJUSTMENT},
    own_codes={"getReserves": {429: ["heavy_reads_busy"], 503: ["read_model_behind"]}},
    shapes=[shapes],
)
