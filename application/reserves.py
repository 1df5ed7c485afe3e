"""Use cases of the reserves: the operator's adjustments (opening balances, moves between reserves).

The balances themselves are derived by the `Postings` projection from every transaction's postings and
these adjustments; no use case reads them.
"""

from __future__ import annotations

import secrets
from datetime import datetime

from application.base import LedgerBase
from application.commands import AdjustmentRequest
from domain.errors import AssetUnknown, ReserveAdjustmentShapeInvalid
from domain.reserves import (
    BUILT_IN,
    AdjustmentKind,
    Movement,
    ReserveAdjustment,
    ReservePlace,
    check_movement,
    reserve,
)


class Reserves(LedgerBase):
    def record_adjustment(self, request: AdjustmentRequest, code: str | None = None) -> ReserveAdjustment:
        """Records an adjustment under `code` (new when not given). The same code with the same request
        returns the adjustment recorded first; with another request it is refused."""
        code = code or self.new_adjustment_code()
        movement = self.movement(request)
        check_movement(movement)

        def record() -> ReserveAdjustment:
            existing = self.find(ReserveAdjustment.create_id(code))
            if existing is not None:
                existing.check_same(movement, request.note)
                return existing
            now = self.clock.now()
            adjustment = ReserveAdjustment.record(code, movement, request.note, now)
            self.save(adjustment, *self._new_places(movement, now))
            return adjustment

        return self.retrying(record)

    def adjustment(self, code: str) -> ReserveAdjustment | None:
        return self.find(ReserveAdjustment.create_id(code))

    def movement(self, request: AdjustmentRequest) -> Movement:
        """The request as a movement, its codes checked against the settings (its rules when recorded)."""
        code = request.asset_code
        if code in self.settings.cryptos:
            asset, crypto = self.settings.crypto_asset(code), True
        elif code in self.settings.currencies:
            asset, crypto = self.settings.fiat(code), False
        else:
            known = ", ".join(sorted([*self.settings.currencies, *self.settings.cryptos]))
            raise AssetUnknown(f"{code!r} is not a currency or crypto-currency of the service: {known}")
        try:
            kind = AdjustmentKind(request.kind)
        except ValueError:
            known = ", ".join(k.value for k in AdjustmentKind)
            raise ReserveAdjustmentShapeInvalid(f"kind {request.kind!r} is not one of {known}") from None
        source = None
        if request.from_reserve is not None or request.from_type is not None:
            source = reserve(request.from_reserve or "", request.from_type or "")
        to = reserve(request.to_reserve, request.to_type)
        return Movement(kind, asset, crypto, request.amount, to, source)

    def _new_places(self, movement: Movement, at: datetime) -> list[ReservePlace]:
        """The reserves named for the first time; a reserve named before must keep its type."""
        new = []
        for place in movement.reserves:
            if place.name in BUILT_IN:
                continue
            known = self.find(ReservePlace.create_id(place.name))
            if known is None:
                new.append(ReservePlace(place.name, place.type.value, at))
            else:
                known.check_type(place)
        return new

    @staticmethod
    def new_adjustment_code() -> str:
        return "RA" + secrets.token_hex(8).upper()
