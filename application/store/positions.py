"""How far the event log went with the writes of the request in hand: what a later read of the same caller
waits for (read-your-writes), rather than for the whole log.

The interface opens a `WritePosition` around a request (`tracking_writes`, naming the partner); every save the
use case makes within it raises the position to the last notification id it recorded. The holder travels in
a context variable, which the threads that run use cases inherit from the request, and is read once the use
case has returned.

Where it is kept: the group committer (`application.store.group_commit`), once told the table
(`keep_write_positions`), writes each partner's position in the same transaction as the partner's events and
marks it `kept`; whatever a save leaves unkept (the library's recorder, a save settled after a connection
fault) the interface keeps itself before the answer leaves.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any


class WritePosition:
    """The last notification id recorded by the writes of one request of `partner` (0 while it has written
    nothing), and how far of it the store has already kept with the events (`kept`)."""

    __slots__ = ("kept", "partner", "position")

    def __init__(self, partner: str | None = None) -> None:
        self.partner = partner
        self.position = 0
        self.kept = 0

    @property
    def left_to_keep(self) -> bool:
        """True when the request wrote past what the store kept: the interface must keep the position."""
        return self.position > self.kept

    def note_kept(self, notification_id: int) -> None:
        """The store wrote this partner's position up to `notification_id` with the events (committed)."""
        if notification_id > self.kept:
            self.kept = notification_id


_current: ContextVar[WritePosition | None] = ContextVar("write_position", default=None)


@contextmanager
def tracking_writes(partner: str | None = None) -> Iterator[WritePosition]:
    written = WritePosition(partner)
    token = _current.set(written)
    try:
        yield written
    finally:
        _current.reset(token)


def current_writes() -> WritePosition | None:
    """The position of the request running in this context, None outside one."""
    return _current.get()


def note_recorded(recordings: Sequence[Any]) -> None:
    """Raises the current request's position to the last of `recordings` (eventsourcing's Recording)."""
    written = _current.get()
    if written is None or not recordings:
        return
    last = max(recording.notification.id for recording in recordings)
    if last > written.position:
        written.position = last
