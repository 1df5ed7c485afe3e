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
from datetime import datetime
from decimal import Decimal
from typing import Any
from uuid import UUID

from application.commands import AdjustmentRequest
from application.context import Context
from domain.errors import AssetUnknown, ReserveAdjustmentShapeInvalid
from domain.reserves import (
    BUILT_IN,
    AdjustmentKind,
    Movement,
    ReserveAdjustment,
    ReserveBook,
    ReservePlace,
    check_movement,
    reserve,
    reserve_changes,
    reserve_event_topics,
)
from domain.transaction import Order, Transaction

RESERVE_TOPICS = reserve_event_topics()
PAGE = 500


class Reserves:
    def __init__(self, context: Context) -> None:
        self.context = context
        self.store = context.store
        self.settings = context.settings

    def record_adjustment(
        self, partner: str, request: AdjustmentRequest, code: str | None = None
    ) -> ReserveAdjustment:
        """Records an adjustment of the partner's reserves under the partner's `code` (new when not given).
        The same code with the same request returns the adjustment recorded first; with another request it
        is refused."""
        code = code or self.new_adjustment_code()
        movement = self.movement(request)
        check_movement(movement)

        def record() -> ReserveAdjustment:
            existing = self.adjustment(partner, code)
            if existing is not None:
                existing.check_same(movement, request.note)
                return existing
            now = self.context.clock.now()
            adjustment = ReserveAdjustment.record(partner, code, movement, request.note, now)
            book = self._drawn_book(partner, movement)
            self.store.save(adjustment, *self._new_places(partner, movement, now), *book)
            return adjustment

        return self.store.retrying(record)

    def adjustment(self, partner: str, code: str) -> ReserveAdjustment | None:
        return self.store.find(ReserveAdjustment.create_id(partner, code))

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
        while True:
            page = self.store.app.recorder.select_notifications(
                start=through + 1, limit=PAGE, topics=RESERVE_TOPICS
            )
            events = [self.store.app.mapper.to_domain_event(notification) for notification in page]
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
        with self.store.loading(*ids):
            found: dict[UUID, Any] = {i: self.store.find(i) for i in ids}
        return {i: transaction.order for i, transaction in found.items() if transaction is not None}

    @staticmethod
    def new_adjustment_code() -> str:
        return "RA" + secrets.token_hex(8).upper()
