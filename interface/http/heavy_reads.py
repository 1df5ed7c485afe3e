"""Heavy reads, at most N at a time per partner: no partner's auditors can slow another partner or /health.

A heavy read is one whose cost grows with the partner's history or the period asked for: the reconciliation
(`GET /reconciliation`), the lists as they stood at an instant (`GET /transactions/custodian?asOf=`,
`GET /reserves?asOf=`), and the console's charts and timelines. Each runs in a worker thread (its handler is
synchronous, `sync_to_thread`) and holds one of its partner's `[heavy_reads] per_partner` slots (1 by
default: with the heavy reads' 2 connections, two partners' heavy reads run side by side) while it runs.
A request that finds its partner's slots taken waits for one at most `wait_seconds` (1 s by default),
then is refused with 429 `heavy_reads_busy` and `Retry-After`, as problem+json: what a partner asks beyond
its slots waits on itself, never on the others' slots, the threads, the connections or /health, which takes
no slot. The reconciliation and the reserves' heavy reads
read on a pool of their own (`heavy_pool`: a share of the worker's connection budget, a quarter of
BROKER_LEDGER_DB_CONNECTIONS and at least 2, `application.store.database.api_pools`; opened as needed), never
on the API's pool of one connection that /health, the reserves and the callbacks share: a heavy read cannot
hold the connection /health waits for. With read servers (BROKER_LEDGER_READ_DATABASE_URL) they have a
second such pool there, tried first; the primary's serves what the read servers cannot give in time
(`interface.http.read_your_writes.ReadPools`).

The API's routes say they are heavy in their `opt` (`HEAVY_READ`: True, or the name of the query parameter
that makes them heavy, such as `asOf`), and `HeavyReadsMiddleware` takes the slot on the event loop before
the handler's thread is taken, so a request waiting for a slot holds no thread; the console's pages, whose
partner is known only inside them, take theirs with `slot()` in their thread. The slots are kept in each
worker process, as the rate limits are: `serve --workers N` lets a partner run up to N times as many.
"""

from __future__ import annotations

import asyncio
import math
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from urllib.parse import parse_qsl

from litestar.enums import ScopeType
from litestar.middleware import ASGIMiddleware
from litestar.types import ASGIApp, Receive, Scope, Send
from psycopg_pool import ConnectionPool

from application.store.database import checked_pool
from domain.errors import quoted_text
from interface.http.problems import ApiProblem
from interface.http.read_your_writes import ON_READ_SERVERS, ReadPools

HEAVY_READ = "heavy_read"  # a route's `opt` key: True, or the query parameter that makes the read heavy
RETRY_AFTER_SECONDS = 1
POLL_SECONDS = 0.01  # how often a request waiting on the event loop looks for a free slot


class HeavyReads:
    """The slots of each partner, thread-safe: `enter` (on the event loop) and `slot` (in a thread) take
    one, waiting at most `wait_seconds`, else raise 429 `heavy_reads_busy`."""

    def __init__(
        self, per_partner: int, wait_seconds: float, now: Callable[[], float] = time.monotonic
    ) -> None:
        if per_partner < 1 or not (math.isfinite(wait_seconds) and wait_seconds >= 0):
            raise ValueError("per_partner must be at least 1 and wait_seconds a number of seconds, 0 or more")
        self.per_partner = per_partner
        self.wait_seconds = wait_seconds
        self._now = now
        self._running: dict[str, int] = {}
        self._freed = threading.Condition()

    def __deepcopy__(self, memo: dict[int, object]) -> HeavyReads:
        """Itself: litestar copies a router's middleware as it registers it, and the slots are one per app."""
        return self

    def running(self, partner: str) -> int:
        """How many heavy reads of the partner hold a slot now."""
        with self._freed:
            return self._running.get(partner, 0)

    def try_enter(self, partner: str) -> bool:
        """Takes a slot of the partner if one is free (then `leave` must give it back)."""
        with self._freed:
            running = self._running.get(partner, 0)
            if running >= self.per_partner:
                return False
            self._running[partner] = running + 1
            return True

    def leave(self, partner: str) -> None:
        with self._freed:
            running = self._running.get(partner, 0) - 1
            if running > 0:
                self._running[partner] = running
            else:
                self._running.pop(partner, None)
            self._freed.notify_all()

    async def enter(self, partner: str) -> None:
        """Takes a slot of the partner on the event loop, looking every POLL_SECONDS until `wait_seconds`
        have passed: no thread waits."""
        deadline = self._now() + self.wait_seconds
        while not self.try_enter(partner):
            left = deadline - self._now()
            if left <= 0:
                raise self.busy(partner)
            await asyncio.sleep(min(POLL_SECONDS, left))

    @contextmanager
    def slot(self, partner: str) -> Iterator[None]:
        """Holds a slot of the partner for the block, in a worker thread (waiting at most `wait_seconds`)."""
        deadline = self._now() + self.wait_seconds
        with self._freed:
            while self._running.get(partner, 0) >= self.per_partner:
                left = deadline - self._now()
                if left <= 0:
                    raise self.busy(partner)
                self._freed.wait(left)
            self._running[partner] = self._running.get(partner, 0) + 1
        try:
            yield
        finally:
            self.leave(partner)

    def busy(self, partner: str) -> ApiProblem:
        return ApiProblem(
            429,
            "heavy_reads_busy",
            f"partner {quoted_text(partner)} already runs {self.per_partner} heavy read(s) (reconciliations, "
            f"lists and reserves asOf, console charts and timelines), as many as it may at once; none ended "
            f"within {self.wait_seconds:g} s. Retry after {RETRY_AFTER_SECONDS} s, or run fewer at once",
            headers={"Retry-After": str(RETRY_AFTER_SECONDS)},
        )


def heavy_pool(database_url: str, connections: int, name: str = "heavy-reads") -> ConnectionPool:
    """The heavy reads' own connections (at most `connections`, opened as needed, closed when idle, named
    `name` in pg_stat_activity), so that they never hold the API's pool, which /health reads on."""
    return checked_pool(database_url, connections, name)


def heavy_pools(url: str, read_url: str | None, connections: int) -> ReadPools:
    """The heavy reads' pools, of `connections` each: the primary's, and the read servers' when set."""
    primary = heavy_pool(url, connections)
    if read_url is None:
        return ReadPools(primary)
    return ReadPools(primary, heavy_pool(read_url, connections, f"{ON_READ_SERVERS} heavy-reads"))


def heavy_partner(scope: Scope) -> str | None:
    """The partner of an authenticated request to a heavy route (one whose `opt` says so, with its query
    parameter when it names one), else None."""
    handler = scope.get("route_handler")
    heavy = handler.opt.get(HEAVY_READ) if handler is not None else None
    if not heavy or scope["method"] == "OPTIONS":
        return None
    if isinstance(heavy, str):
        sent = parse_qsl(scope.get("query_string", b"").decode("latin-1"), keep_blank_values=True)
        if not any(name == heavy for name, _ in sent):
            return None
    return getattr(scope.get("user"), "partner", None)


class HeavyReadsMiddleware(ASGIMiddleware):
    """Holds a slot of the caller's partner around each heavy route's handler (see the module)."""

    scopes = (ScopeType.HTTP,)

    def __init__(self, reads: HeavyReads) -> None:
        self.reads = reads

    async def handle(self, scope: Scope, receive: Receive, send: Send, next_app: ASGIApp) -> None:
        partner = heavy_partner(scope)
        if partner is None:
            await next_app(scope, receive, send)
            return
        await self.reads.enter(partner)
        try:
            await next_app(scope, receive, send)
        finally:
            self.reads.leave(partner)
