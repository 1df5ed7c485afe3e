"""The events feed's waker (`interface/events/waker.py`) on a fake index: one poll loop for every waiting
request, waking those whose partner has news, none that a poll cannot concern, and none missed between a
request's read and its wait."""

from __future__ import annotations

import asyncio

from interface.events.waker import FeedWaker


class FakeIndex:
    """The index's position and each row's partner, as `FeedReader.news` reads them."""

    def __init__(self) -> None:
        self.rows: list[str] = []  # the partner of the row at position i + 1
        self.polls = 0

    def add(self, partner: str) -> int:
        self.rows.append(partner)
        return len(self.rows)

    def news(self, since: int | None) -> tuple[int, frozenset[str]]:
        self.polls += 1
        position = len(self.rows)
        return position, frozenset() if since is None else frozenset(self.rows[since:position])


async def polled(index: FakeIndex, polls: int = 1) -> None:
    while index.polls < polls:
        await asyncio.sleep(0.005)


def run(test) -> None:
    asyncio.run(test())


def test_a_row_of_its_partner_wakes_a_waiting_request_and_another_partners_does_not() -> None:
    async def test() -> None:
        index = FakeIndex()
        waker = FeedWaker(index.news, interval=0.01)
        seen = index.add("demo")
        mine = asyncio.create_task(waker.news_for("demo", seen, 5))
        theirs = asyncio.create_task(waker.news_for("other", seen, 0.5))
        await polled(index)  # (on its first poll, the waker wakes every request it finds behind)
        index.add("demo")
        assert await asyncio.wait_for(mine, 1) is True
        assert await theirs is False  # its time ran out: nothing of its partner came
        assert waker.waiting == 0

    run(test)


def test_news_between_a_read_and_its_wait_is_not_missed() -> None:
    async def test() -> None:
        index = FakeIndex()
        waker = FeedWaker(index.news, interval=0.01)
        keep_polling = asyncio.create_task(waker.news_for("nobody", 0, 2))
        await polled(index)
        index.add("other")
        await polled(index, index.polls + 2)  # the waker has seen position 1
        seen = 0  # a request read its page before that row, and of another partner's, found nothing new
        index.add("demo")  # then demo's row came, before the poll that sees it ... and before the wait
        await asyncio.sleep(0.05)
        assert await asyncio.wait_for(waker.news_for("demo", seen, 5), 1) is True
        keep_polling.cancel()

    run(test)


def test_no_request_waiting_no_poll_and_a_wait_for_a_position_reached_returns_at_once() -> None:
    async def test() -> None:
        index = FakeIndex()
        waker = FeedWaker(index.news, interval=0.01)
        index.add("demo")
        await asyncio.sleep(0.05)
        assert index.polls == 0
        assert await waker.reached(1, 1) is True  # the first poll finds it there
        polls = index.polls
        assert await waker.reached(1, 1) is True and index.polls == polls  # known: no poll at all
        await asyncio.sleep(0.05)
        assert index.polls == polls

    run(test)


def test_closing_wakes_every_waiting_request() -> None:
    async def test() -> None:
        index = FakeIndex()
        waker = FeedWaker(index.news, interval=0.01)
        waiting = [asyncio.create_task(waker.news_for("demo", 0, 30)) for _ in range(5)]
        await asyncio.sleep(0.05)
        await waker.close()
        assert await asyncio.wait_for(asyncio.gather(*waiting), 1) == [True] * 5

    run(test)
