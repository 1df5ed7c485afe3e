"""Use cases of the reserves: a partner's operator's adjustments (opening balances, moves between reserves).

Reserves are each partner's own book (`domain.reserves`): every use case acts on the caller's partner's
reserves, adjustment codes and books only, so another partner's reserve name or adjustment code is simply
unknown here. The balances shown are derived by the `Postings` projection; no use case reads them. A move
is checked against the partner's `ReserveBook` of the asset (what each of its reserves held at a position of
the log) plus what the log recorded since for the partner, counted here from the events themselves, and the
book is saved with the move.
"""

from __future__ import annotations

import secrets
from collections import defaultdict
from collections.abc import Collection
from datetime import datetime
from decimal import Decimal
from typing import Any
from uuid import UUID

from application.commands import AdjustmentRequest
from application.context import Context
from application.request_checks import problems_of, refuse_all
from application.store.request_writes import RequestWrites
from domain.errors import AssetUnknown, DomainError, ReserveAdjustmentShapeInvalid
from domain.money import Asset
from domain.pricing import check_amount
from domain.reserves import (
    BUILT_IN,
    AdjustmentKind,
    Movement,
    Reserve,
    ReserveAdjustment,
    ReserveBook,
    ReservePlace,
    movement_problems,
    reserve,
    reserve_changes,
    reserve_event_topics,
)
from domain.transaction import Order, Transaction

RESERVE_TOPICS = reserve_event_topics()


def _kind(kind: str) -> AdjustmentKind:
    try:
        return AdjustmentKind(kind)
    except ValueError:
        known = ", ".join(k.value for k in AdjustmentKind)
        raise ReserveAdjustmentShapeInvalid(f"kind {kind!r} is not one of {known}") from None


def _reserve(name: str | None, type_: str | None) -> Reserve | None:
    """The reserve a request names, None when it names none (the source of an opening balance)."""
    if name is None and type_ is None:
        return None
    return reserve(name or "", type_ or "")


PAGE = 500


class Reserves:
    def __init__(self, context: Context) -> None:
        self.context = context
        self.store = context.store
        self.settings = context.settings

    def record_adjustment(
        self,
        partner: str,
        request: AdjustmentRequest,
        code: str | None = None,
        *,
        unit: RequestWrites | None = None,
    ) -> ReserveAdjustment:
        """Records an adjustment of the partner's reserves under the partner's `code` (new when not given),
        within the request's `unit` of work. The same code with the same request returns the adjustment
        recorded first; with another request it is refused."""
        code = code or self.new_adjustment_code()
        refuse_all(self.adjustment_problems(request))
        movement = self.movement(request)
        for attempt in self.store.attempts():
            with attempt:
                existing = self.adjustment(partner, code)
                if existing is not None:
                    existing.check_same(movement, request.note)
                    return existing
                now = self.context.clock.now()
                adjustment = ReserveAdjustment.record(partner, code, movement, request.note, now)
                book = self._drawn_book(partner, movement)
                self.store.save(adjustment, *self._new_places(partner, movement, now), *book, unit=unit)
                return adjustment

    def adjustment(self, partner: str, code: str) -> ReserveAdjustment | None:
        return self.store.find(ReserveAdjustment.create_id(partner, code))

    def adjustment_problems(
        self, request: AdjustmentRequest, unread: Collection[str] = ()
    ) -> list[DomainError]:
        """Every problem of an adjustment's own content, each listed: its asset, kind and reserves against
        the settings, then the rules every adjustment follows (`movement_problems`). Of a body that broke its
        schema, a field that could not be read (named in `unread`) is None here and is not judged, nor what
        depends on it."""
        found = problems_of(
            lambda: request.asset_code is None or self._asset(request.asset_code),
            lambda: request.kind is None or _kind(request.kind),
            lambda: (
                None in (request.to_reserve, request.to_type) or _reserve(request.to_reserve, request.to_type)
            ),
            lambda: _reserve(request.from_reserve, request.from_type),
        )
        readable = None not in (request.kind, request.asset_code, request.amount, request.to_reserve)
        if not found and readable and not unread:
            return movement_problems(self.movement(request))
        known = request.asset_code is not None and self._known(request.asset_code)
        if known and request.amount is not None:
            asset = self._asset(request.asset_code)[0]
            found += problems_of(lambda: check_amount(asset, request.amount, "amount"))
        return found

    def movement(self, request: AdjustmentRequest) -> Movement:
        """The request as a movement, its codes checked against the settings (its rules when recorded)."""
        asset, crypto = self._asset(request.asset_code)
        source = _reserve(request.from_reserve, request.from_type)
        to = reserve(request.to_reserve, request.to_type)
        return Movement(_kind(request.kind), asset, crypto, request.amount, to, source)

    def _known(self, code: str) -> bool:
        return code in self.settings.cryptos or code in self.settings.currencies

    def _asset(self, code: str) -> tuple[Asset, bool]:
        """The asset of a currency or crypto-currency code of the settings, and whether it is a crypto."""
        if code in self.settings.cryptos:
            return self.settings.crypto_asset(code), True
        if code in self.settings.currencies:
            return self.settings.fiat(code), False
        known = ", ".join(sorted([*self.settings.currencies, *self.settings.cryptos]))
        raise AssetUnknown(f"{code!r} is not a currency or crypto-currency of the service: {known}")

    def _new_places(self, partner: str, movement: Movement, at: datetime) -> list[ReservePlace]:
        """The partner's reserves named for the first time; a reserve it named before must keep its type."""
        new = []
        for place in movement.reserves:
            if place.name in BUILT_IN:
                continue
            known = self.store.find(ReservePlace.create_id(partner, place.name))
            if known is None:
                new.append(ReservePlace.named(partner, place, at))
            else:
                known.check_type(place)
        return new

    def _drawn_book(self, partner: str, movement: Movement) -> list[ReserveBook]:
        """For a move, the partner's book of the asset with the move's source checked to hold the amount
        (refused with `InsufficientReserve` otherwise); nothing for an opening balance (it only adds)."""
        if movement.source is None:
            return []
        asset = movement.asset.code
        book = self.store.get_or_create(
            ReserveBook.create_id(partner, asset), lambda: ReserveBook.of(partner, asset)
        )
        through, changes = self._changes_since(partner, asset, book.through)
        book.draw(movement.source.name, movement.amount, through, changes, movement.asset)
        return [book]

    def _changes_since(self, partner: str, asset: str, through: int) -> tuple[int, dict[str, Decimal]]:
        """What the events after notification `through` did to each of the partner's reserves in `asset`,
        and the id of the last of them (of any partner). The events table is written under a lock, one
        recording after the other, so nothing can appear later below the last id read."""
        changes: dict[str, Decimal] = defaultdict(Decimal)
        decode = self.store.decoder
        while True:
            page = self.store.notifications(through + 1, PAGE, topics=RESERVE_TOPICS)
            events = [decode(notification) for notification in page]
            orders = self._orders({e.originator_id for e in events if isinstance(e, Transaction.Event)})
            for notification, domain_event in zip(page, events, strict=True):
                for change in reserve_changes(domain_event, orders.get(domain_event.originator_id)):
                    if change.partner == partner and change.asset == asset:
                        changes[change.reserve] += change.amount
                through = notification.id
            if len(page) < PAGE:
                return through, dict(changes)

    def _orders(self, ids: set[UUID]) -> dict[UUID, Order]:
        """The orders of these transactions, read in one query."""
        with self.store.loading(*ids) as loaded:
            found: dict[UUID, Any] = {i: loaded.find(i) for i in ids}
        return {i: transaction.order for i, transaction in found.items() if transaction is not None}

    @staticmethod
    def new_adjustment_code() -> str:
        return "RA" + secrets.token_hex(8).upper()
