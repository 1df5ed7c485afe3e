"""Reserves: the named places where the service keeps its money, and the operator's adjustments of them.

A reserve is a place of one type (`Exchange`, `HotWallet`, `ColdStore`) holding currencies or
crypto-currencies. Two are built in and used by every transaction: `hot-wallet` (a HotWallet: the crypto
the service receives from sellers and sends to buyers) and `bank` (an Exchange: the fiat paid in by buyers
and paid out to sellers). Any other name becomes a reserve the first time an adjustment names it, with the
type given then; naming it later with another type is refused. HotWallets and ColdStores hold
crypto-currencies only.

An adjustment is recorded by the operator, once per adjustment code:
- an opening balance brings an amount of one asset into one reserve (from the owners' equity);
- a move takes an amount of one asset from one reserve to another (e.g. hot wallet to cold store).
Amounts are positive and exact at the asset's precision. Reserves may go below zero: the ledger records what
the operator reports and never reads balances to decide (reserves are derived from the postings).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from enum import StrEnum
from uuid import UUID

from eventsourcing.domain import Aggregate, event

from domain.errors import (
    ReserveAdjustmentConflict,
    ReserveAdjustmentShapeInvalid,
    ReserveCannotHoldAsset,
    ReserveMoveToSameReserve,
    ReserveTypeMismatch,
    ReserveTypeUnknown,
    ValidationFailed,
)
from domain.ids import business_id
from domain.money import Asset
from domain.pricing import check_amount


class ReserveType(StrEnum):
    EXCHANGE = "Exchange"
    HOT_WALLET = "HotWallet"
    COLD_STORE = "ColdStore"


class AdjustmentKind(StrEnum):
    OPENING_BALANCE = "OpeningBalance"
    MOVE = "Move"


HOT_WALLET = "hot-wallet"
BANK = "bank"
BUILT_IN: dict[str, ReserveType] = {HOT_WALLET: ReserveType.HOT_WALLET, BANK: ReserveType.EXCHANGE}
CRYPTO_ONLY = frozenset({ReserveType.HOT_WALLET, ReserveType.COLD_STORE})
MAX_NAME = 64


@dataclass(frozen=True)
class Reserve:
    """A reserve as an adjustment names it."""

    name: str
    type: ReserveType


def reserve(name: str, type: str) -> Reserve:
    """A reserve named in a request; the built-in names have fixed types."""
    if not name or len(name) > MAX_NAME:
        raise ValidationFailed(f"a reserve name must have 1 to {MAX_NAME} characters, got {name!r}")
    try:
        kind = ReserveType(type)
    except ValueError:
        known = ", ".join(t.value for t in ReserveType)
        raise ReserveTypeUnknown(f"reserve type {type!r} is not one of {known}") from None
    built_in = BUILT_IN.get(name)
    if built_in is not None and built_in != kind:
        raise _mismatch(name, built_in, kind)
    return Reserve(name, kind)


def _mismatch(name: str, recorded: ReserveType, given: ReserveType) -> Exception:
    return ReserveTypeMismatch(f"reserve {name} is a {recorded}, not a {given}")


@dataclass(frozen=True)
class Movement:
    """What an adjustment does: `amount` of `asset` into `to`, out of `source` for a move."""

    kind: AdjustmentKind
    asset: Asset
    crypto: bool  # whether the asset is a crypto-currency
    amount: Decimal
    to: Reserve
    source: Reserve | None = None

    @property
    def reserves(self) -> tuple[Reserve, ...]:
        return (self.to,) if self.source is None else (self.source, self.to)


def check_movement(movement: Movement) -> None:
    """The rules every adjustment follows, whatever was recorded before."""
    check_amount(movement.asset, movement.amount, "amount")
    if movement.kind is AdjustmentKind.OPENING_BALANCE and movement.source is not None:
        raise ReserveAdjustmentShapeInvalid("an OpeningBalance names toReserve only, not fromReserve")
    if movement.kind is AdjustmentKind.MOVE:
        if movement.source is None:
            raise ReserveAdjustmentShapeInvalid("a Move names both fromReserve and toReserve")
        if movement.source.name == movement.to.name:
            raise ReserveMoveToSameReserve(f"a Move from {movement.to.name} to itself moves nothing")
    for place in movement.reserves:
        if place.type in CRYPTO_ONLY and not movement.crypto:
            raise ReserveCannotHoldAsset(
                f"reserve {place.name} is a {place.type} and holds crypto-currencies only, not "
                f"{movement.asset.code}"
            )


class ReservePlace(Aggregate):
    """A reserve named by an operator's adjustment, with the type it was first given (not the built-ins)."""

    @staticmethod
    def create_id(name: str, **_: object) -> UUID:
        return business_id("reserve", name)

    @event("Named")
    def __init__(self, name: str, type: str, at: datetime) -> None:
        self.name = name
        self.type = ReserveType(type)
        self.created = at

    def check_type(self, given: Reserve) -> None:
        if given.type != self.type:
            raise _mismatch(self.name, self.type, given.type)


class ReserveAdjustment(Aggregate):
    """One adjustment of the reserves, recorded once under its code."""

    @staticmethod
    def create_id(code: str, **_: object) -> UUID:
        return business_id("reserve-adjustment", code)

    @event("Recorded")
    def __init__(
        self,
        code: str,
        kind: str,
        asset_code: str,
        amount: Decimal,
        to_reserve: str,
        to_type: str,
        from_reserve: str | None,
        from_type: str | None,
        note: str | None,
        at: datetime,
    ) -> None:
        self.code = code
        self.kind = AdjustmentKind(kind)
        self.asset_code = asset_code
        self.amount = amount
        self.to = Reserve(to_reserve, ReserveType(to_type))
        self.source = None if from_reserve is None else Reserve(from_reserve, ReserveType(str(from_type)))
        self.note = note
        self.created = at

    @classmethod
    def record(cls, code: str, movement: Movement, note: str | None, at: datetime) -> ReserveAdjustment:
        check_movement(movement)
        source = movement.source
        return cls(
            code=code,
            kind=movement.kind.value,
            asset_code=movement.asset.code,
            amount=movement.amount,
            to_reserve=movement.to.name,
            to_type=movement.to.type.value,
            from_reserve=None if source is None else source.name,
            from_type=None if source is None else source.type.value,
            note=note,
            at=at,
        )

    def check_same(self, movement: Movement, note: str | None) -> None:
        """A second request under the same code must ask for the same adjustment."""
        same = (
            self.kind == movement.kind
            and self.asset_code == movement.asset.code
            and self.amount == movement.amount
            and self.to == movement.to
            and self.source == movement.source
            and self.note == note
        )
        if not same:
            raise ReserveAdjustmentConflict(
                f"adjustment {self.code} was recorded with other values; use a new adjustmentCode"
            )
