"""`EventsFeed`: the answer of `GET /events`, on the event loop: a page read in a worker thread
(`FeedReader`), after the partner's own last write when the index gets there in time, and with `wait`, the
wait for news on the process's one waker (`FeedWaker`), holding no thread and no connection meanwhile.

- **Read your writes.** A page that does not hold the partner's last write waits (at most OWN_WRITE_SECONDS)
  for the index to apply it, unless the index's projection has a recorded failure; a page is still answered
  if it does not get there: it is complete up to its `nextCursor` all the same, and the write comes on a
  later page. (A full page does not wait: the write lies beyond it anyway.)
- **Long polling.** With `wait` (seconds, at most MOST_WAIT_SECONDS), a page with nothing to show waits
  until the partner has a new row in the index, reads again, and answers as soon as it shows a change or
  the time is up (then with nothing, and the same `nextCursor`). A page of rows that show nothing (a new
  account, a sendout with too few confirmations) is read past while waiting.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field, replace
from typing import Any

from application.ledger import Ledger
from interface.events import shapes as s
from interface.events.reading import FeedPage, FeedQuery, FeedReader
from interface.events.waker import FeedWaker
from interface.http.read_your_writes import WritePositions

OWN_WRITE_SECONDS = 2.0
MOST_WAIT_SECONDS = 30


@dataclass
class EventsFeed:
    reader: FeedReader
    waker: FeedWaker
    own_write_seconds: float = OWN_WRITE_SECONDS
    _rereads: dict[tuple[str, FeedQuery], asyncio.Future[FeedPage]] = field(default_factory=dict)

    @classmethod
    def of(cls, ledger: Ledger, view: Any, positions: WritePositions) -> EventsFeed:
        """The feed of a process: its index read on the pool of `view` (the API's view of the read models),
        its subjects from `ledger`'s log, the partners' writes from `positions`, and one waker."""
        reader = FeedReader.on_view(ledger, view, positions)
        return cls(reader, FeedWaker(reader.news))

    async def answer(self, partner: str, query: FeedQuery, wait: float) -> s.EventsPage:
        """The page after `query.after`, waiting up to `wait` seconds for a change when there is none."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + min(wait, MOST_WAIT_SECONDS)
        page = await self._read(partner, query)
        if (
            page.behind
            and not page.has_more
            and await self.waker.reached(page.written, self.own_write_seconds)
        ):
            page = await self._read(partner, query)
        while not page.data and not page.has_more:
            left = deadline - loop.time()
            if left <= 0 or not await self.waker.news_for(partner, page.position, left):
                break
            query = replace(query, after=page.next_position)
            page = await self._reread(partner, query)
        return page.body()

    async def _read(self, partner: str, query: FeedQuery) -> FeedPage:
        return await asyncio.to_thread(self.reader.page, partner, query)

    async def _reread(self, partner: str, query: FeedQuery) -> FeedPage:
        """A read after a wake, shared by the requests woken for the same page: one change of a partner
        wakes all its waiting requests at once, and those that ask the same query share one read. One that
        joins a read begun before its wake may get a page without its news: waiting again from that page,
        the waker's next poll wakes it (the index is past what it saw) and it reads again."""
        key = (partner, query)
        shared = self._rereads.get(key)
        if shared is None:
            shared = asyncio.ensure_future(self._read(partner, query))
            self._rereads[key] = shared
            shared.add_done_callback(lambda _: self._rereads.pop(key, None))
        return await asyncio.shield(shared)

    async def close(self) -> None:
        await self.waker.close()
