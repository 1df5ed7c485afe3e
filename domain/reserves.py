"""Reserves: the named places where a partner keeps its money, and its operator's adjustments of them.

Reserves are each partner's own book: a reserve is named by a partner and its name means nothing to another
partner (two partners' `cold-1` are two reserves), its trades reach only its own built-in reserves, and its
operator adjusts only its own. The partner is part of every reserve aggregate's id (`business_id` of the
partner and the name, the code or the asset), so another partner's reserve, adjustment code or book is
simply unknown to a partner: the same answer as one that does not exist.

A reserve is a place of one type (`Exchange`, `HotWallet`, `ColdStore`) holding currencies or
crypto-currencies. Two are built in for every partner and used by each of its transactions: `hot-wallet`
(a HotWallet: the crypto the partner's sellers pay in and its buyers are sent) and `bank` (an Exchange: the
fiat paid in by its buyers and paid out to its sellers). Any other name becomes a reserve of the partner
the first time its operator's adjustment names it, with the type given then; naming it later with another
type is refused. HotWallets and ColdStores hold crypto-currencies only.

An adjustment is recorded by a partner's operator, once per adjustment code of the partner:
- an opening balance brings an amount of one asset into one reserve (from the owners' equity);
- a move takes an amount of one asset from one reserve to another (e.g. hot wallet to cold store).
Amounts are positive and exact at the asset's precision.

A move never takes a reserve below zero (`insufficient_reserve`): the partner's `ReserveBook` of the asset,
saved with every move, holds what each of the partner's reserves held at a position of the log, and a move
first counts what the log recorded since (the partner's adjustments and the partner's trades that reach its
built-in reserves, see `reserve_changes`), so two concurrent moves conflict on the book and the second is
decided on what the first left. Trades are never refused: a buy's sendout leaves the partner's hot wallet
and a sell's payout leaves its bank whatever the ledger says they hold (the chain and the bank moved the
money already), so `hot-wallet` and `bank` may show below zero (say, before their opening balances are
recorded). Every other reserve moves only by adjustments and is never below zero.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from enum import StrEnum
from typing import Any
from uuid import UUID

from eventsourcing.domain import Aggregate, event

from domain.errors import (
    DomainError,
    InsufficientReserve,
    ReserveAdjustmentConflict,
    ReserveAdjustmentShapeInvalid,
    ReserveCannotHoldAsset,
    ReserveMoveToSameReserve,
    ReserveTypeMismatch,
    ReserveTypeUnknown,
    ValidationFailed,
)
from domain.ids import business_id
from domain.money import WIDE, Asset
from domain.pricing import check_amount
from domain.transaction import Order, Transaction, TransactionType


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
# The partner of an adjustment recorded when the reserves were one book for every partner (its event of
# class version 1 names none): no partner's, so no partner sees or moves what it recorded.
NO_PARTNER = ""


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
    """The rules every adjustment follows, whatever was recorded before: refused with the first it breaks."""
    broken = movement_problems(movement)
    if broken:
        raise broken[0]


def movement_problems(movement: Movement) -> list[DomainError]:
    """Every rule of `check_movement` that `movement` breaks, each listed."""
    found: list[DomainError] = []
    try:
        check_amount(movement.asset, movement.amount, "amount")
    except DomainError as problem:
        found.append(problem)
    if movement.kind is AdjustmentKind.OPENING_BALANCE and movement.source is not None:
        found.append(ReserveAdjustmentShapeInvalid("an OpeningBalance names toReserve only, not fromReserve"))
    if movement.kind is AdjustmentKind.MOVE and movement.source is None:
        found.append(ReserveAdjustmentShapeInvalid("a Move names both fromReserve and toReserve"))
    elif movement.kind is AdjustmentKind.MOVE and movement.source.name == movement.to.name:
        found.append(ReserveMoveToSameReserve(f"a Move from {movement.to.name} to itself moves nothing"))
    for place in movement.reserves:
        if place.type in CRYPTO_ONLY and not movement.crypto:
            found.append(
                ReserveCannotHoldAsset(
                    f"reserve {place.name} is a {place.type} and holds crypto-currencies only, not "
                    f"{movement.asset.code}"
                )
            )
    return found


class ReservePlace(Aggregate):
    """A reserve of a partner named by its operator's adjustment, with the type it was first given (not the
    built-ins). Made by `named`: its id is the partner's and the name's."""

    @staticmethod
    def create_id(partner: str, name: str, **_: object) -> UUID:
        return business_id("reserve", partner, name)

    @classmethod
    def named(cls, partner: str, place: Reserve, at: datetime) -> ReservePlace:
        return cls._create(
            cls.Named, id=cls.create_id(partner, place.name), name=place.name, type=place.type.value, at=at
        )

    @event("Named")
    def __init__(self, name: str, type: str, at: datetime) -> None:
        self.name = name
        self.type = ReserveType(type)
        self.created = at

    def check_type(self, given: Reserve) -> None:
        if given.type != self.type:
            raise _mismatch(self.name, self.type, given.type)


class ReserveAdjustment(Aggregate):
    """One adjustment of a partner's reserves, recorded once under its code (a code of the partner)."""

    class Recorded(Aggregate.Created):
        """Version 2 names the partner whose reserves it adjusts; one of version 1 (recorded when the
        reserves were one book for every partner) belongs to no partner (`NO_PARTNER`)."""

        class_version = 2
        partner: str
        code: str
        kind: str
        asset_code: str
        amount: Decimal
        to_reserve: str
        to_type: str
        from_reserve: str | None
        from_type: str | None
        note: str | None
        at: datetime

        @staticmethod
        def upcast_v1_v2(state: dict[str, Any]) -> None:
            state["partner"] = NO_PARTNER

    @staticmethod
    def create_id(partner: str, code: str, **_: object) -> UUID:
        return business_id("reserve-adjustment", partner, code)

    @event("Recorded")
    def __init__(
        self,
        partner: str,
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
        self.partner = partner
        self.code = code
        self.kind = AdjustmentKind(kind)
        self.asset_code = asset_code
        self.amount = amount
        self.to = Reserve(to_reserve, ReserveType(to_type))
        self.source = None if from_reserve is None else Reserve(from_reserve, ReserveType(str(from_type)))
        self.note = note
        self.created = at

    @classmethod
    def record(
        cls, partner: str, code: str, movement: Movement, note: str | None, at: datetime
    ) -> ReserveAdjustment:
        check_movement(movement)
        source = movement.source
        return cls(
            partner=partner,
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


def may_go_negative(name: str) -> bool:
    """Whether trades draw the reserve without asking (a partner's built-in hot wallet and bank); every other
    reserve moves only by its partner's operator's adjustments and must never be below zero."""
    return name in BUILT_IN


@dataclass(frozen=True)
class ReserveChange:
    """What one event did to one reserve of one partner in one asset: positive in, negative out."""

    partner: str
    reserve: str
    asset: str
    amount: Decimal


# The transaction events that change a reserve (as the ledger postings post them, see
# projections.posting_rules), by name: a sell's payment received (ToPayout), whether to the right amount
# (Blocked: another amount) or late (PaidLate), its payout (PaidOut), and a completion (a buy's sendout; a
# sell of a partner without Payouts: received and paid out at once); a BLOCKED sell's amount accepted (paid
# out at once without Payouts), and a refund's sendout (the amount and its network fee leave the wallet).
TRADE_EVENTS = ("Completed", "ToPayout", "PaidOut", "Blocked", "PaidLate", "ReceivedAccepted", "Refunded")


def reserve_event_topics() -> list[str]:
    """The topics of every event that changes a reserve: adjustments and `TRADE_EVENTS`."""
    transaction = f"{Transaction.__module__}:{Transaction.__qualname__}"
    adjustment = f"{ReserveAdjustment.__module__}:{ReserveAdjustment.__qualname__}.Recorded"
    return sorted([adjustment, *(f"{transaction}.{name}" for name in TRADE_EVENTS)])


def reserve_changes(domain_event: object, order: Order | None = None) -> list[ReserveChange]:
    """What an event did to the reserves (nothing for most): an adjustment to its partner's, a trade to its
    partner's built-in ones; `order` is the transaction's, for its events."""
    if isinstance(domain_event, ReserveAdjustment.Recorded):
        partner, asset, amount = domain_event.partner, domain_event.asset_code, domain_event.amount
        changes = [ReserveChange(partner, domain_event.to_reserve, asset, amount)]
        if domain_event.from_reserve is not None:
            changes.append(ReserveChange(partner, domain_event.from_reserve, asset, -amount))
        return changes
    name = type(domain_event).__name__
    if order is None or not isinstance(domain_event, Transaction.Event) or name not in TRADE_EVENTS:
        return []
    return _trade_changes(name, order, domain_event)


def _trade_changes(name: str, order: Order, domain_event: Any) -> list[ReserveChange]:
    quote, partner = order.quote, order.partner

    def hot_wallet(amount: Decimal) -> ReserveChange:
        return ReserveChange(partner, HOT_WALLET, order.crypto, amount)

    def bank(amount: Decimal) -> ReserveChange:
        return ReserveChange(partner, BANK, order.currency, amount)

    if name == "Completed" and order.type == TransactionType.BUY:
        return [hot_wallet(-(quote.crypto_amount + quote.fees.network_crypto)), bank(quote.fiat_value)]
    if name == "Completed":
        return [hot_wallet(quote.crypto_amount), bank(-quote.fiat_value)]
    if name == "ToPayout":
        return [hot_wallet(quote.crypto_amount)]
    if name == "PaidOut":
        return [bank(-quote.fiat_value)]
    if name == "ReceivedAccepted":  # the crypto came in when it was Blocked
        return [] if domain_event.to_payout else [bank(-quote.fiat_value)]
    if name == "Refunded":
        return [hot_wallet(-(domain_event.amount + domain_event.network_fee))]
    received = domain_event.payment.amount  # Blocked, PaidLate: what arrived, whatever the quote said
    return [hot_wallet(received)] if received else []


class ReserveBook(Aggregate):
    """A partner's book of one asset: what each of the partner's reserves held as of a position of the log,
    the state its operator's moves are checked against and saved with, so that concurrent moves are decided
    one after the other. Opened by `of`: its id is the partner's and the asset's."""

    @staticmethod
    def create_id(partner: str, asset_code: str, **_: object) -> UUID:
        return business_id("reserve-book", partner, asset_code)

    @classmethod
    def of(cls, partner: str, asset_code: str) -> ReserveBook:
        return cls._create(cls.Opened, id=cls.create_id(partner, asset_code), asset_code=asset_code)

    @event("Opened")
    def __init__(self, asset_code: str) -> None:
        self.asset_code = asset_code
        self.through = 0  # the notification id of the last event counted
        self.balances: dict[str, Decimal] = {}

    def held(self, name: str) -> Decimal:
        return self.balances.get(name, Decimal(0))

    def draw(
        self, name: str, amount: Decimal, through: int, changes: dict[str, Decimal], asset: Asset
    ) -> None:
        """A move of `amount` out of reserve `name`, after the `changes` the log recorded up to `through`;
        refused if the reserve holds less."""
        held = self.held(name) + changes.get(name, Decimal(0))
        if held < amount:
            code, shown = asset.code, held.quantize(asset.quantum, context=WIDE)
            most = max(shown, asset.zero())
            raise InsufficientReserve(
                f"reserve {name} holds {shown:f} {code}, less than the {amount:f} {code} this Move asks "
                f"for; a move never takes a reserve below zero: move at most {most:f} {code}, or record "
                f"what {name} really holds first (an OpeningBalance)"
            )
        self._counted(through, {key: value for key, value in changes.items() if value})

    @event("Counted")
    def _counted(self, through: int, changes: dict[str, Decimal]) -> None:
        self.through = max(self.through, through)
        for name, change in changes.items():
            self.balances[name] = self.held(name) + change
