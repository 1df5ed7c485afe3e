"""`FeedWaker`: the one thing of a process that watches the feed for the requests waiting on it.

A request that found nothing new waits on the event loop for a future, holding no thread and no connection.
While any request waits, one task of the process asks the index every POLL_SECONDS, in one statement on a
connection lent for it alone, where it stands and which partners have rows since it last asked
(`projections.events_feed.news_since`); it wakes the waiting requests of those partners, which then read
their page again. With no request waiting, it asks nothing. So 500 waiting requests cost what one does: one
short statement per interval, and no connection between them.

Why polling the index rather than LISTENing to the log's NOTIFY: a request waits for the index (its rows are
what it reads), which the projection writes a little after the log, maybe in another process; the index's
position is where that shows, on the primary and on a read server alike; and a LISTEN would hold a connection
of its own for as long as anyone waits.

A request that starts waiting says what it has seen (`seen`: the index's position when it read its page). The
partners a poll names are those with rows since the poll before; a request that came in after a poll past
what it saw is woken by the next poll if the index is past what it saw, whoever the rows are of, so no news
between its read and its wait is missed (it reads again, and then waits from there). So is every request on
the first poll, and when the index moved back (a rebuild empties it).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass, field

log = logging.getLogger("broker_ledger.events")
POLL_SECONDS = 0.05
News = Callable[[int | None], tuple[int, frozenset[str]]]  # `FeedReader.news`


@dataclass(eq=False)
class _Waiter:
    partner: str | None  # None: waits for the index to reach `position`, whatever its rows
    position: int  # news: after it, with a row of the partner; reached: it, at least
    future: asyncio.Future[None] = field(default_factory=lambda: asyncio.get_running_loop().create_future())
    covered: int = -1  # news: the polls found no row of the partner after `position` up to here

    def __post_init__(self) -> None:
        self.covered = self.position

    def due(self, known: int | None, position: int, partners: frozenset[str]) -> bool:
        """Whether the index, moved from `known` (the last poll's position, None before the first) to
        `position` with rows of `partners` in between, has what the waiter waits for. Where the polls do not
        cover all it has not seen (on the first poll, when the index moved back, when the waiter came in
        after a poll past what it saw), it is woken if the index is past what it saw, whoever the rows are
        of: it reads again."""
        if self.partner is None:
            return position >= self.position
        if position <= self.position:
            return False
        if known is None or position < known or self.covered < known or self.partner in partners:
            return True
        self.covered = position
        return False

    def wake(self) -> None:
        if not self.future.done():
            self.future.set_result(None)


class FeedWaker:
    """Wakes the requests waiting for the feed (see the module's docstring); one per process."""

    def __init__(self, news: News, interval: float = POLL_SECONDS) -> None:
        self._news = news
        self.interval = interval
        self._waiters: set[_Waiter] = set()
        self._position: int | None = None  # the index's, as last seen; None before the first poll
        self._task: asyncio.Task[None] | None = None
        self._failing = False  # the last poll failed (said once in the log, not every interval)
        self.polls = 0  # how often it asked

    @property
    def waiting(self) -> int:
        return len(self._waiters)

    async def news_for(self, partner: str, seen: int, timeout: float) -> bool:
        """Waits, at most `timeout` seconds, until the index has a row of `partner` after position `seen`
        (or may have: the caller reads again); False when the time ran out."""
        return await self._wait(_Waiter(partner, seen), timeout)

    async def reached(self, position: int, timeout: float) -> bool:
        """Waits, at most `timeout` seconds, until the index has applied `position`."""
        return await self._wait(_Waiter(None, position), timeout)

    async def _wait(self, waiter: _Waiter, timeout: float) -> bool:
        known = self._position
        if waiter.partner is None and known is not None and known >= waiter.position:
            return True  # there already
        if timeout <= 0:
            return False
        self._waiters.add(waiter)
        self._start()
        try:
            await asyncio.wait({waiter.future}, timeout=timeout)
        finally:
            self._waiters.discard(waiter)
        return waiter.future.done() and not waiter.future.cancelled()

    def _start(self) -> None:
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._watch(), name="events feed waker")

    async def _watch(self) -> None:
        """While anyone waits: ask the index, wake whom it concerns, sleep an interval."""
        loop = asyncio.get_running_loop()
        while self._waiters:
            try:
                position, partners = await loop.run_in_executor(None, self._news, self._position)
            except Exception as error:  # the database away: the waiters' own time runs out meanwhile
                if not self._failing:
                    log.warning("the events feed's waker cannot read the index: %s", error)
                self._failing = True
            else:
                if self._failing:
                    log.info("the events feed's waker reads the index again")
                self._failing = False
                self._moved(position, partners)
            self.polls += 1
            await asyncio.sleep(self.interval)

    def _moved(self, position: int, partners: frozenset[str]) -> None:
        """`partners` have rows after the position of the last poll up to `position`: wakes the waiters
        concerned (`_Waiter.due`)."""
        known = self._position
        self._position = position
        for waiter in list(self._waiters):
            if waiter.due(known, position, partners):
                waiter.wake()

    async def close(self) -> None:
        """Wakes every waiting request (each answers what it has) and stops asking."""
        for waiter in list(self._waiters):
            waiter.wake()
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, RuntimeError):
                await task
