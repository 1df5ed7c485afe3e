"""What waits for the group committer (`application.store.group_commit`): saves of events, and companions
(`PendingSave`, `application.store.group_commit.types`), both in one `SaveQueue`; the committer takes
whatever waits as its next batch.

A request may also have statements ride with the *first save it makes* (its `RequestWrites`'s
`ride_with_first_save`, `application.store.request_writes`): they are written in that save's transaction,
under its savepoint on the conflict path, so the save's events and the statements commit together or not at
all. If the database refuses the statements, the save fails with `CompanionRefused` (not a version
conflict: the use case is not run again) and nothing of it is written. An Idempotency-Key's claim rides so:
the request needs no transaction of its own to claim its key, and its events are written only if the key is
its own.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Sequence
from typing import Any

from application.store.group_commit.types import PendingSave
from application.store.request_writes import Rows, Statement


def companion(statements: Sequence[Statement], loop: asyncio.AbstractEventLoop) -> tuple[PendingSave, Any]:
    """A companion of these statements, and the future (of `loop`) that gets its rows or its error."""
    future: asyncio.Future[list[Rows]] = loop.create_future()

    def settled(save: PendingSave) -> None:  # on the committer's thread
        loop.call_soon_threadsafe(_settle_future, future, save)

    return PendingSave((), statements=statements, on_done=settled), future


def awaited_on(save: PendingSave, loop: asyncio.AbstractEventLoop) -> asyncio.Future[None]:
    """A future of `loop` done when `save` is settled (after its own `on_done`, by which its riding
    statements learn their fate), for a use case that awaits its save on the loop."""
    future: asyncio.Future[None] = loop.create_future()
    then = save.on_done

    def settled(save: PendingSave) -> None:  # on the committer's thread
        if then is not None:
            then(save)
        loop.call_soon_threadsafe(_done, future)

    save.on_done = settled
    return future


def _done(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


def _settle_future(future: asyncio.Future[list[Rows]], save: PendingSave) -> None:
    if future.done():  # its waiter gave up
        return
    if save.error is not None:
        future.set_exception(save.error)
    else:
        future.set_result(save.rows)


class SaveQueue:
    """Saves and companions waiting for the committer, taken a batch at a time."""

    def __init__(self) -> None:
        self._waiting: list[PendingSave] = []
        self._ready = threading.Condition(threading.Lock())

    def put(self, save: PendingSave) -> None:
        with self._ready:
            self._waiting.append(save)
            self._ready.notify()

    def take_batch(self, max_events: int) -> list[PendingSave]:
        """Waits for a save, then takes the waiting saves up to `max_events` events (at least one save)."""
        with self._ready:
            while not self._waiting:
                self._ready.wait()
            taken, events = 0, 0
            for save in self._waiting:
                if taken and events + save.size > max_events:
                    break
                taken += 1
                events += save.size
            batch, self._waiting = self._waiting[:taken], self._waiting[taken:]
            return batch

    def waiting_for(self) -> float:
        """How long the oldest save still waiting for the committer has waited (0 when none waits)."""
        with self._ready:
            return time.monotonic() - self._waiting[0].queued_at if self._waiting else 0.0

    def withdraw(self, save: PendingSave) -> bool:
        """Takes `save` back if the committer has not taken it yet (then nothing of it is written)."""
        with self._ready:
            if save in self._waiting:
                self._waiting.remove(save)
                return True
            return False
