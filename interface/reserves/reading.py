"""The reading use case of GET /reserves: the caller's partner's own reserves, read after its writes.

Reserves are each partner's own book: a partner is shown its own reserves only, with what its own trades
locked or moved and its own operator's adjustments, never another partner's (`read_positions` of the
partner).

A read first waits until the `Postings` view has processed the partner's last write (its position, kept by
`interface/http/read_your_writes.py`), at most `WAIT_SECONDS`, or not at all when the projection has a
recorded
failure; a view still behind that write is not served as if it were complete: 503 `read_model_behind` with
`Retry-After`, as for a list of transactions. With `asOf` (`reserves_at`), the same wait, then the
reserves as the ledger held them at that instant, summed from the postings of the events up to it
(`read_positions_at`). Every configured asset has the partner's built-in reserves (the
hot wallet for cryptos, the bank for currencies) even before anything was posted to them; amounts are shown
to the asset's places.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import UTC, date, datetime
from decimal import Decimal
from typing import Any

from litestar.datastructures import State
from psycopg import Connection
from psycopg_pool import ConnectionPool

from application.settings import Settings
from domain.money import WIDE
from domain.reserves import BANK, HOT_WALLET
from interface.http.read_your_writes import WritePositions, holds_write, read_model_behind
from interface.reserves import shapes as s
from projections import status
from projections.ledger_postings import PostingsProjection
from projections.queries import transaction_postings
from projections.reserve_positions import (
    ReservePosition,
    read_daily_positions,
    read_positions,
    read_positions_at,
    wait_for_position,
)

log = logging.getLogger("broker_ledger.reserves")
WAIT_SECONDS = 2.0  # how long a read waits for the Postings view to reach the writes made before it


@dataclass(frozen=True)
class ReserveReader:
    settings: Settings
    pool: ConnectionPool
    written: WritePositions
    wait_seconds: float = WAIT_SECONDS
    heavy_pool: ConnectionPool | None = None  # the heavy reads' (asOf, by day), never the API's pool

    @classmethod
    def of(cls, state: State) -> ReserveReader:
        """The app's: its settings, connection pools and partners' write positions (a dependency)."""
        return cls(state.settings, state.pool, state.write_positions, heavy_pool=state.heavy_pool)

    def _pool(self, heavy: bool) -> ConnectionPool:
        return self.heavy_pool if heavy and self.heavy_pool is not None else self.pool

    def reserves(self, partner: str) -> s.Reserves:
        """The partner's reserves once the Postings view has its last write (or the wait ran out)."""
        return reserves_body(self.settings, self.positions(partner))

    def reserves_at(self, partner: str, at: datetime) -> s.Reserves:
        """The partner's reserves as they stood at `at` (`asOf`), read after its last write."""
        return reserves_body(self.settings, self.positions(partner, at))

    def positions(self, partner: str, at: datetime | None = None) -> list[ReservePosition]:
        """The partner's positions now, or at `at`, read after its last write (503 while the view lags)."""
        with self._pool(at is not None).connection() as conn:
            hold_partners_postings(conn, self.written, partner, self.wait_seconds, "the reserves")
            if at is None:
                return read_positions(conn, partner, self.built_in())
            return read_positions_at(conn, partner, at, self.built_in())

    def positions_by_day(
        self, partner: str, first: date, last: date
    ) -> list[tuple[date, list[ReservePosition]]]:
        """The partner's positions at the end of each UTC day from `first` to `last`, read after its last
        write (the console's chart of reserves)."""
        with self._pool(True).connection() as conn:
            hold_partners_postings(conn, self.written, partner, self.wait_seconds, "the reserves")
            return read_daily_positions(conn, partner, first, last, self.built_in())

    def transaction_postings(self, partner: str, code: str) -> list[dict[str, Any]]:
        """The postings of the partner's transaction `code`, read after its last write (a timeline's)."""
        with self._pool(True).connection() as conn:
            hold_partners_postings(conn, self.written, partner, self.wait_seconds, "the postings")
            return transaction_postings(conn, partner, code)

    def built_in(self) -> list[tuple[str, str]]:
        """The reserves every partner has: the hot wallet of each crypto, the bank of each currency."""
        return [(HOT_WALLET, code) for code in self.settings.cryptos] + [
            (BANK, code) for code in self.settings.currencies
        ]


def hold_partners_postings(
    conn: Connection, written: WritePositions, partner: str, wait_seconds: float, answer: str
) -> None:
    """Returns once the Postings view holds the partner's last write (at most `wait_seconds`, not at all
    while its projection has a recorded failure); else 503 `read_model_behind`: `answer` (the reserves, a
    reconciliation) would miss that write. Every read of the postings waits this way."""
    last = written.last(conn, partner)

    def failing() -> bool:
        return status.has_failure(conn, PostingsProjection.name)

    def reached(position: int, seconds: float) -> bool:
        return wait_for_position(conn, position, seconds)

    if not holds_write(last, reached, failing, wait_seconds):
        log.warning("ledger postings behind %s's last write (%d); answered 503", partner, last)
        raise read_model_behind(failing(), "ledger postings", answer)


def reserves_body(settings: Settings, positions: list[ReservePosition]) -> s.Reserves:
    items = [(p.code in settings.cryptos, reserve_body(settings, p)) for p in positions]
    return s.Reserves(
        crypto_reserves=[item for crypto, item in items if crypto],
        currency_reserves=[item for crypto, item in items if not crypto],
    )


def shown_amount(settings: Settings, code: str, amount: Decimal) -> Decimal:
    """An amount of asset `code` at the asset's places (as it is, for an asset no longer configured)."""
    if code in settings.cryptos:
        quantum = settings.crypto_asset(code).quantum
    elif code in settings.currencies:
        quantum = settings.fiat(code).quantum
    else:
        return amount
    return amount.quantize(quantum, context=WIDE)


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
