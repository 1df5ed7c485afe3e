"""How far the event log went with the writes of the request in hand: what a later read of the same caller
waits for (read-your-writes), rather than for the whole log.

The interface opens a `WritePosition` around a request (`tracking_writes`); every save the use case makes
within it raises the position to the last notification id it recorded. The holder travels in a context
variable, which the threads that run use cases inherit from the request, and is read once the use case has
returned.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any


class WritePosition:
    """The last notification id recorded by the writes of one request; 0 while it has written nothing."""

    __slots__ = ("position",)

    def __init__(self) -> None:
        self.position = 0


_current: ContextVar[WritePosition | None] = ContextVar("write_position", default=None)


@contextmanager
def tracking_writes() -> Iterator[WritePosition]:
    written = WritePosition()
    token = _current.set(written)
    try:
        yield written
    finally:
        _current.reset(token)


def note_recorded(recordings: Sequence[Any]) -> None:
    """Raises the current request's position to the last of `recordings` (eventsourcing's Recording)."""
    written = _current.get()
    if written is None or not recordings:
        return
    last = max(recording.notification.id for recording in recordings)
    if last > written.position:
        written.position = last
