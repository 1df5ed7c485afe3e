"""The group commit's types: what waits for the committer (`PendingSave`), a save of events or a companion.

A *save* holds one use case's events; its thread waits for their notification ids, or for its error. A
*companion* holds statements on another table that ride in the committer's next transaction with whatever
events it carries (alone when no events wait): an Idempotency-Key's claim or answer, for instance, which
then needs no transaction, commit and round trip of its own. Its waiter, on an event loop, gets the rows each
statement returned, or its error.

A leaf of the package: it imports nothing of it, only the request's writes it serves
(`application.store.request_writes`: `RequestWrites`, `Statement`, `BatchedRow`, `Rows`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence

from eventsourcing.persistence import StoredEvent

from application.store.request_writes import RequestWrites, Riding, Rows


class PendingSave:
    """One save waiting for the committer: its events (or a companion's statements), then its notification
    ids and the companion's rows, or its error. `unit` is the request's writes (`RequestWrites`), whose
    partner's write position the save raises (None without a request, or without a partner: nothing to
    keep)."""

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
        unit: RequestWrites | None = None,
        statements: Sequence[Riding] = (),
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
        """Tells `on_done` first, then wakes the waiter: a request that wakes finds its first-save statements
        settled already."""
        try:
            if self.on_done is not None:
                self.on_done(self)
        finally:
            self.done.set()
