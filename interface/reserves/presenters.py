"""The reserves as GET /reserves answers them: each asset of each reserve at the asset's places."""

from __future__ import annotations

from datetime import UTC
from decimal import Decimal

from application.settings import Settings
from interface.reserves import shapes as s
from interface.shared.reserve_reading import shown_amount
from projections.reserve_positions import ReservePosition


def reserves_body(settings: Settings, positions: list[ReservePosition]) -> s.Reserves:
    items = [(p.code in settings.cryptos, reserve_body(settings, p)) for p in positions]
    return s.Reserves(
        crypto_reserves=[item for crypto, item in items if crypto],
        currency_reserves=[item for crypto, item in items if not crypto],
    )


def reserve_body(settings: Settings, position: ReservePosition) -> s.Reserve:
    def shown(amount: Decimal) -> Decimal:
        return shown_amount(settings, position.code, amount)

    return s.Reserve(
        name=position.name,
        type=position.type,
        code=position.code,
        total=shown(position.total),
        locked=shown(position.locked),
        available=shown(position.available),
        unconfirmed=shown(position.unconfirmed),
        updated=None if position.updated is None else position.updated.astimezone(UTC),
    )
