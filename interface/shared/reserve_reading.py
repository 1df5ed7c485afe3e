"""The reserves and postings of the caller's partner, read after its writes: GET /reserves, the reconciliation
(`reconciliation_of`, the API's and the console's) and the console's charts and timelines read them here.

Reserves are each partner's own book: a partner is shown its own reserves only, with what its own trades
locked or moved and its own operator's adjustments, never another partner's (`read_positions` of the
partner).

A read first waits until the `Postings` view has processed the partner's last write (its position, kept by
`interface/http/read_your_writes.py`), at most `WAIT_SECONDS`, or not at all when the projection has a
recorded failure; a view still behind that write is not served as if it were complete: 503
`read_model_behind` with `Retry-After`, as for a list of transactions. With `asOf` (`positions` at an
instant), the same wait, then the
reserves as the ledger held them at that instant, the sums of the postings of the events up to it by
`read.balances_at` (`read_positions_at`; `projections.daily_balances`: the one definition of a reserve's
sum, which the console's days read too). Every configured asset has the partner's built-in reserves (the
hot wallet for cryptos, the bank for currencies) even before anything was posted to them; amounts are shown
to the asset's places. With read servers (BROKER_LEDGER_READ_DATABASE_URL), the postings are read there
when they hold the partner's last write in time, else on the primary (`holding_last_write`).
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import date, datetime
from decimal import Decimal
from typing import Any

from psycopg import Connection

from application.settings import Settings
from domain.money import WIDE
from domain.reserves import BANK, HOT_WALLET
from interface.http.read_your_writes import ReadPools, TrackedView, WritePositions, holding_last_write
from projections import status
from projections.ledger_postings import PostingsProjection
from projections.queries import transaction_postings
from projections.reconciliation import (
    Period,
    Reconciliation,
    Window,
    read_reconciliation,
    read_reserves,
)
from projections.reserve_positions import (
    ReservePosition,
    read_daily_positions,
    read_position,
    read_positions,
    read_positions_at,
    wait_for_position,
)

WAIT_SECONDS = 2.0  # how long a read waits for the Postings view to reach the writes made before it


def _postings_failing(conn: Connection) -> bool:
    return status.has_failure(conn, PostingsProjection.name)


POSTINGS = TrackedView("ledger postings", wait_for_position, _postings_failing)


@dataclass(frozen=True)
class ReserveReader:
    """The app's one, built by the composition root and handed to the routes as `reserve_reader`."""

    settings: Settings
    pools: ReadPools  # the reserves now: the API's pool, after the read servers' counterpart when set
    written: WritePositions
    wait_seconds: float = WAIT_SECONDS
    heavy_pools: ReadPools | None = None  # the heavy reads' (asOf, by day), never the API's pool

    def _pools(self, heavy: bool) -> ReadPools:
        return self.heavy_pools if heavy and self.heavy_pools is not None else self.pools

    def positions(self, partner: str, at: datetime | None = None) -> list[ReservePosition]:
        """The partner's positions now, or at `at`, read after its last write (503 while the view lags)."""
        pools = self._pools(at is not None)
        with postings_holding_write(pools, self.written, partner, self.wait_seconds, "the reserves") as conn:
            if at is None:
                return read_positions(conn, partner, self.built_in())
            return read_positions_at(conn, partner, at, self.built_in())

    def positions_by_day(
        self, partner: str, first: date, last: date
    ) -> list[tuple[date, list[ReservePosition]]]:
        """The partner's positions at the end of each UTC day from `first` to `last`, read after its last
        write (the console's chart of reserves)."""
        pools = self._pools(True)
        with postings_holding_write(pools, self.written, partner, self.wait_seconds, "the reserves") as conn:
            return read_daily_positions(conn, partner, first, last, self.built_in())

    def transaction_postings(self, partner: str, code: str) -> list[dict[str, Any]]:
        """The postings of the partner's transaction `code`, read after its last write (a timeline's)."""
        pools = self._pools(True)
        with postings_holding_write(pools, self.written, partner, self.wait_seconds, "the postings") as conn:
            return transaction_postings(conn, partner, code)

    def built_in(self) -> list[tuple[str, str]]:
        """The reserves every partner has: the hot wallet of each crypto, the bank of each currency."""
        return [(HOT_WALLET, code) for code in self.settings.cryptos] + [
            (BANK, code) for code in self.settings.currencies
        ]


def postings_holding_write(
    pools: ReadPools, written: WritePositions, partner: str, wait_seconds: float, answer: str
) -> AbstractContextManager[Connection]:
    """A connection on which the Postings view holds the partner's last write, for the block: the read
    servers' when they have it within `wait_seconds`, else the primary's (waiting at most what is left of
    them, not at all while its projection has a recorded failure); else 503 `read_model_behind`: `answer`
    (the reserves, a reconciliation) would miss that write. Every read of the postings waits this way."""
    return holding_last_write(pools, written, partner, wait_seconds, POSTINGS, answer)


def reconciliation_of(
    pools: ReadPools,
    written: WritePositions,
    partner: str,
    period: Period,
    window: Window,
    wait_seconds: float,
) -> Reconciliation:
    """Once the postings hold the partner's last write: its reserves, reports (in `window`) and differences
    of the period, in one transaction of the postings' view (a read server's when it has that write in time,
    else the primary's): `GET /reconciliation` and the console's page read it so."""
    held = postings_holding_write(pools, written, partner, wait_seconds, "the reconciliation")
    with held as conn, conn.transaction():  # the position first: the postings read then hold its events
        position = read_position(conn)
        reserves = read_reserves(conn, partner, period).get(partner, [])
        return read_reconciliation(conn, partner, period, position, reserves, window)


def shown_amount(settings: Settings, code: str, amount: Decimal) -> Decimal:
    """An amount of asset `code` at the asset's places (as it is, for an asset no longer configured)."""
    if code in settings.cryptos:
        quantum = settings.crypto_asset(code).quantum
    elif code in settings.currencies:
        quantum = settings.fiat(code).quantum
    else:
        return amount
    return amount.quantize(quantum, context=WIDE)
