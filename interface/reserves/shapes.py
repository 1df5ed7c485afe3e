"""Bodies of the reserves: `GET /reserves` and the operator's `POST /reserves/adjustments`."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from typing import Annotated, Literal

import msgspec

from interface.http.shapes import Amount, Body, Code, Text, example

Timestamp = Annotated[datetime, msgspec.Meta(tz=True)]
ReserveType = Literal["Exchange", "HotWallet", "ColdStore"]
AssetCode = Annotated[
    str,
    msgspec.Meta(
        min_length=2, max_length=10, pattern=r"^[A-Z0-9]+\Z", description="a fiat currency or crypto-currency"
    ),
    example("BTC"),
]


class ReserveRef(Body):
    """A reserve of the caller's partner (each partner keeps its own book: another partner's reserve of the
    same name is another reserve): `hot-wallet` (HotWallet) and `bank` (Exchange) are built in; any other
    name is a reserve from the first adjustment naming it, with the type given then."""

    name: Annotated[str, Code, example("hot-wallet")]
    type: Annotated[ReserveType, example("HotWallet")]


class ReserveAdjustmentCreate(Body):
    """An opening balance into `toReserve` (from equity), or a move from `fromReserve` to `toReserve`."""

    kind: Annotated[Literal["OpeningBalance", "Move"], example("OpeningBalance")]
    code: AssetCode
    amount: Annotated[Amount, example(1)]
    to_reserve: ReserveRef
    from_reserve: ReserveRef | None = None
    adjustment_code: Annotated[str, Code] | None = None
    note: Annotated[str, Text] | None = None


class ReserveAdjustment(Body):
    adjustment_code: str
    kind: str
    code: str
    amount: Decimal
    to_reserve: ReserveRef
    from_reserve: ReserveRef | None
    note: str | None
    created: Timestamp


class Reserve(Body):
    """One asset in one reserve: `available` = `total` - `locked` (promised to open transactions);
    `unconfirmed` is seen on chain, not yet confirmed (not part of `total`)."""

    name: str
    type: ReserveType
    code: str
    total: Decimal
    locked: Decimal
    available: Decimal
    unconfirmed: Decimal
    updated: Timestamp | None


class Reserves(Body):
    crypto_reserves: list[Reserve]
    currency_reserves: list[Reserve]
