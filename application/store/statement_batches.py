"""Statements of one kind from concurrent requests on the event loop, sent to the database together.

`StatementBatches` does for the API's own small statements (an Idempotency-Key's claim, its answer, the
read-ahead of a use case run on the loop, `application.store.loop_reads`) what the event store's group commit
does for events (`application/store/group_commit/`): a request hands over its
item and awaits its outcome; whatever waits when the previous batch is back goes as the next batch, in one
statement and one round trip. So under load many requests share a round trip and a commit, while a lone
request pays only its own, as before.

- Items with the same `key` never share a batch (a statement may not touch one row twice): the later one
  waits for the next batch, so it sees what the earlier one did, as if they ran one after the other.
- A batch refused for the data of one of its items (an error in `split_on`) is run again item by item, so
  that item's fault fails only its own request; any other error (the database unreachable, a timeout)
  fails the batch's requests at once, each as it would have failed alone.
- A request that stops waiting (cancelled) does not stop its batch; the outcome is dropped.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Hashable, Sequence
from typing import Generic, TypeVar

T = TypeVar("T")
R = TypeVar("R")
MAX_ITEMS = 256  # items per statement; more waiting go in the next batch


class StatementBatches(Generic[T, R]):
    """Runs `run` (items -> one outcome each, in order) on batches of the items handed to `submit`."""

    def __init__(
        self,
        run: Callable[[list[T]], Awaitable[Sequence[R]]],
        key: Callable[[T], Hashable],
        split_on: tuple[type[BaseException], ...] = (),
    ) -> None:
        self._run = run
        self._key = key
        self._split_on = split_on
        self._waiting: list[tuple[T, asyncio.Future[R]]] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._drain_task: asyncio.Task[None] | None = None

    async def submit(self, item: T) -> R:
        """The item's outcome once its batch has run (its error, raised here, if it failed)."""
        loop = asyncio.get_running_loop()
        if self._loop is not loop:  # a new event loop (tests): nothing of the old one carries over
            self._loop, self._waiting, self._drain_task = loop, [], None
        future: asyncio.Future[R] = loop.create_future()
        self._waiting.append((item, future))
        if self._drain_task is None:
            self._drain_task = loop.create_task(self._drain())
        return await future

    async def _drain(self) -> None:
        batch: list[tuple[T, asyncio.Future[R]]] = []
        try:
            while self._waiting:
                batch = self._take()
                outcomes = await self._outcomes([item for item, _ in batch])
                for (_, future), outcome in zip(batch, outcomes, strict=True):
                    _settle(future, outcome)
                batch = []
        except BaseException as error:  # cancelled with the loop: nobody may wait forever
            for _, future in [*batch, *self._waiting]:
                _settle(future, error)
            self._waiting = []
            raise
        finally:
            self._drain_task = None

    def _take(self) -> list[tuple[T, asyncio.Future[R]]]:
        """The waiting items in order, one per key, at most MAX_ITEMS; the rest stay waiting."""
        taken, left, keys = [], [], set()
        for waiting in self._waiting:
            key = self._key(waiting[0])
            if key in keys or len(taken) >= MAX_ITEMS:
                left.append(waiting)
            else:
                keys.add(key)
                taken.append(waiting)
        self._waiting = left
        return taken

    async def _outcomes(self, items: list[T]) -> list[R | BaseException]:
        try:
            return list(await self._run(items))
        except self._split_on as refused:
            if len(items) == 1:
                return [refused]
        except Exception as error:
            return [error] * len(items)
        outcomes: list[R | BaseException] = []
        for item in items:  # one item's data was refused: each alone, so only its own request fails
            try:
                outcomes.extend(await self._run([item]))
            except Exception as error:
                outcomes.append(error)
        return outcomes


def _settle(future: asyncio.Future[R], outcome: R | BaseException) -> None:
    if future.done():  # its request stopped waiting
        return
    if isinstance(outcome, asyncio.CancelledError):
        future.cancel()
    elif isinstance(outcome, BaseException):
        future.set_exception(outcome)
    else:
        future.set_result(outcome)
