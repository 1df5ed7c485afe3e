"""The caller's partner's reserves, derived from the ledger postings of its transactions and its operator's
adjustments, and those adjustments: reserves are each partner's own book."""

from __future__ import annotations

import hashlib
from typing import Annotated

from litestar import Controller, Request, get, post
from litestar.di import NamedDependency
from litestar.params import JSONBody

from application.commands import AdjustmentRequest
from domain.reserves import ReserveAdjustment as Adjustment
from interface.http.dependencies import ReservesDep, principal
from interface.http.documented import IdempotencyKey, problems, version_header
from interface.http.heavy_reads import HEAVY_READ
from interface.http.request_writes import unit_of
from interface.http.security import AUDITOR, BROKER, OPERATOR, authorize, roles
from interface.reserves import shapes as s
from interface.reserves.presenters import reserves_body
from interface.shared.query_parameters import moment, moment_of
from interface.shared.reserve_reading import ReserveReader


class ReserveController(Controller):
    path = "/reserves"
    tags = ["Reserves"]
    guards = [authorize]
    parameters = version_header()

    @get(
        "/",
        operation_id="getReserves",
        opt={**roles(BROKER, OPERATOR, AUDITOR), HEAVY_READ: "asOf"},  # asOf: a heavy read
        sync_to_thread=True,
    )
    def reserves(
        self,
        request: Request,
        reserve_reader: NamedDependency[ReserveReader],
        as_of: Annotated[str | None, moment("asOf", "the reserves as the ledger held them then")] = None,
    ) -> s.Reserves:
        """The partner's own reserves per place and asset: total, locked by its open transactions, available
        and unconfirmed, derived from the ledger postings of its transactions and its operator's adjustments
        (as of its last write, unless the postings lag more than two seconds behind); with `asOf`, as they
        stood at that time, from the postings of the events up to it (by the ledger's clock, as the history's
        `asOf`)."""
        partner = principal(request).partner
        at = moment_of("asOf", as_of)
        return reserves_body(reserve_reader.settings, reserve_reader.positions(partner, at))

    @post(
        "/adjustments",
        operation_id="createReserveAdjustment",
        status_code=201,
        opt=roles(OPERATOR),
        responses=problems(409, 422),
        sync_to_thread=True,
    )
    def adjust(
        self,
        request: Request,
        data: JSONBody[s.ReserveAdjustmentCreate],
        reserves: ReservesDep,
        idempotency_key: IdempotencyKey,
    ) -> s.ReserveAdjustment:
        """Records an opening balance or a move between the partner's own reserves. Under the same
        `adjustmentCode` (or the same Idempotency-Key) the same adjustment is recorded once; another one is
        refused (409). Another partner's reserves and codes are unknown here."""
        partner = principal(request).partner
        code = data.adjustment_code or adjustment_code_for(partner, idempotency_key)
        adjustment = reserves.record_adjustment(
            partner, adjustment_request(data), code, unit=unit_of(request)
        )
        return adjustment_body(adjustment)


def adjustment_request(data: s.ReserveAdjustmentCreate) -> AdjustmentRequest:
    source = data.from_reserve
    return AdjustmentRequest(
        kind=data.kind,
        asset_code=data.code,
        amount=data.amount,
        to_reserve=data.to_reserve.name,
        to_type=data.to_reserve.type,
        from_reserve=source.name if source else None,
        from_type=source.type if source else None,
        note=data.note,
    )


def adjustment_code_for(partner: str, key: str | None) -> str | None:
    """The code of an adjustment made under an idempotency key: the same on every retry."""
    if not key:
        return None
    digest = hashlib.sha256(f"{partner}\x1freserve-adjustment\x1f{key}".encode()).hexdigest()
    return "RA" + digest[:16].upper()


def adjustment_body(adjustment: Adjustment) -> s.ReserveAdjustment:
    source = adjustment.source
    return s.ReserveAdjustment(
        adjustment_code=adjustment.code,
        kind=adjustment.kind.value,
        code=adjustment.asset_code,
        amount=adjustment.amount,
        to_reserve=s.ReserveRef(name=adjustment.to.name, type=adjustment.to.type.value),
        from_reserve=None if source is None else s.ReserveRef(name=source.name, type=source.type.value),
        note=adjustment.note,
        created=adjustment.created,
    )
