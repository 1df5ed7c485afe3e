"""What waits for the group committer (`application.store.group_commit`): saves of events, and companions.

A *save* holds one use case's events; its thread waits for their notification ids, or for its error. A
*companion* holds statements on another table that ride in the committer's next transaction with whatever
events it carries (alone when no events wait): an Idempotency-Key's claim or answer, for instance, which
then needs no transaction, commit and round trip of its own. Its waiter, on an event loop, gets the rows each
statement returned, or its error.

Both wait in one `SaveQueue`; the committer takes whatever waits as its next batch.

A request may also have statements ride with the *first save it makes* (its `UnitOfWork`'s
`ride_with_first_save`, `application.store.unit_of_work`): they are written in that save's transaction,
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
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from eventsourcing.persistence import StoredEvent

if TYPE_CHECKING:
    from application.store.unit_of_work import UnitOfWork

Statement = tuple[str, Sequence[Any]]  # SQL text and its parameters (sent in binary)
Rows = list[tuple[Any, ...]]


class PendingSave:
    """One save waiting for the committer: its events (or a companion's statements), then its notification
    ids and the companion's rows, or its error. `unit` is the request's unit of work whose partner's write
    position the save raises (None without a request, or without a partner: nothing to keep)."""

    __slots__ = (
        "ambiguous",
        "done",
        "error",
        "events",
        "notification_ids",
        "on_done",
        "queued_at",
        "rows",
        "statements",
        "unit",
    )

    def __init__(
        self,
        events: Sequence[StoredEvent],
        unit: UnitOfWork | None = None,
        statements: Sequence[Statement] = (),
        on_done: Callable[[PendingSave], None] | None = None,
    ) -> None:
        self.events = events
        self.unit = unit if unit is not None and unit.partner is not None else None
        self.statements = statements
        self.on_done = on_done
        self.notification_ids: list[int] = []
        self.rows: list[Rows] = []
        self.error: BaseException | None = None
        self.ambiguous = False  # failed without knowing whether its events were written
        self.done = threading.Event()
        self.queued_at = time.monotonic()

    @property
    def size(self) -> int:
        """What it weighs in a batch: its events, or 1 for a companion."""
        return len(self.events) or 1

    def succeed(self, notification_ids: list[int], position_kept: bool = False) -> None:
        self.notification_ids = notification_ids
        if position_kept and self.unit is not None and notification_ids:
            self.unit.note_kept(notification_ids[-1])
        self._settle()

    def fail(self, error: BaseException) -> None:
        self.error = error
        self._settle()

    def _settle(self) -> None:
        """Tells `on_done` first, then wakes the waiter: a request that wakes finds its unit of work's
        first-save statements settled already."""
        try:
            if self.on_done is not None:
                self.on_done(self)
        finally:
            self.done.set()


class CompanionRefused(Exception):
    """The database refused the statements that rode with a save (its `__cause__`, psycopg's error): the
    save's events were not written either."""


def companion(statements: Sequence[Statement], loop: asyncio.AbstractEventLoop) -> tuple[PendingSave, Any]:
    """A companion of these statements, and the future (of `loop`) that gets its rows or its error."""
    future: asyncio.Future[list[Rows]] = loop.create_future()

    def settled(save: PendingSave) -> None:  # on the committer's thread
        loop.call_soon_threadsafe(_settle_future, future, save)

    return PendingSave((), statements=statements, on_done=settled), future


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
