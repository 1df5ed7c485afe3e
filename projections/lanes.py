"""A pass of several projections over the event log, shared by the live worker (`projections.live`) and
the rebuild (`projections.rebuild`): a `Lane` per projection (its view, its position, the failure that
stopped it), a page of stored events read as tuples (`read_page`), each event decoded at most once whatever
the number of projections asking (`PageDecoder`), and a page applied to one lane alone after the page of
several failed (`apply_alone`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from eventsourcing.persistence import Notification
from eventsourcing.projection import Projection

from application.store.log import LedgerLog
from projections.base.postgres import ReadModel
from projections.base.runner import Decode, ProjectionFailed, ProjectionSpec, apply_page, processor

Progress = Callable[[str, int], None]  # (projection name, events applied)


@dataclass
class Lane:
    """One projection in a pass: its view, its position, and the failure that stopped it, if any."""

    spec: ProjectionSpec
    view: ReadModel
    projection: Projection[Any] = field(init=False)
    process: Callable[[Notification, Decode], None] = field(init=False)  # see `runner.processor`
    position: int = field(init=False)
    failure: ProjectionFailed | None = None

    def __post_init__(self) -> None:
        self.projection = self.spec.projection_class(view=self.view)
        self.process = processor(self.projection)
        self.position = self.view.position()

    def unapplied(self, notifications: Sequence[Notification]) -> list[Notification]:
        return [n for n in notifications if n.id > self.position]


class PageDecoder:
    """Decodes each stored event of a page at most once, whatever the number of projections asking."""

    def __init__(self, decode: Decode) -> None:
        self._decode = decode
        self._events: dict[int, Any] = {}

    def __call__(self, notification: Notification) -> Any:
        event = self._events.get(notification.id)
        if event is None:
            event = self._events[notification.id] = self._decode(notification)
        return event


def read_page(log_app: LedgerLog, start: int, limit: int, stop: int | None) -> list[Notification]:
    """The stored events from notification id `start` on (up to `stop`), at most `limit`, read as tuples (a
    page of a rebuild is thousands of rows): the log's `page`."""
    return log_app.page(start, limit, stop)


def apply_alone(lane: Lane, page: Sequence[Notification], decode: Decode, progress: Progress | None) -> None:
    try:
        apply_page(lane.spec, lane.projection, lane.view, page, decode)
    except ProjectionFailed as failure:
        lane.failure = failure
        lane.position = lane.view.position()
        return
    moved(lane, page, progress)


def moved(lane: Lane, page: Sequence[Notification], progress: Progress | None) -> None:
    lane.position = page[-1].id
    if progress is not None:
        progress(lane.spec.name, len(page))
