"""Rebuilds: every projection replayed from its position in ONE pass over the event log.

Each page of the log (`REBUILD_PAGE` events) is read once and each of its events decoded at most once (only
if some projection takes it); the page is then handed to every projection, each writing its rows and its own
position in its own transaction on its own connection, exactly as `runner.replay` does for one (so a rebuilt
projection writes the rows and positions of a live run, and a rebuild interrupted anywhere resumes from each
projection's position). The projections' transactions of a page are open together, in pipeline mode: while
Python computes one projection's page, PostgreSQL writes the page of the one before, and the next page is
read while PostgreSQL commits this one. A projection whose page fails is applied again alone
(`runner.apply_page`, event by event); one that cannot apply an event stops there (`Lane.failure`) and the
others go on.

Where the time goes (`bench/rebuild.py`): Python, on one core, decoding events and computing rows (the
callback outbox encoding the transactions' states most of all); PostgreSQL writes on the other core.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any

from eventsourcing.persistence import Notification

from application.store.log import LedgerLog
from projections.connection import locked
from projections.lanes import Lane, PageDecoder, Progress, apply_alone, moved, read_page
from projections.runner import Decode, ProjectionSpec, open_view

GC_ALLOCATIONS = 100_000  # see `fewer_collections`
REBUILD_PAGE = 5000  # events read and written per transaction by a rebuild (a live page: `runner.PAGE`)


def replay_all(
    log_app: LedgerLog,
    lanes: Sequence[Lane],
    *,
    stop_at: int | None = None,
    batch: int = REBUILD_PAGE,
    progress: Progress | None = None,
) -> None:
    """Processes every event after each lane's position (up to `stop_at`), a page at a time for all lanes;
    the lanes' positions move on as their pages commit."""
    running = [lane for lane in lanes if lane.failure is None]
    position = min((lane.position for lane in running), default=0)
    following: list[Notification] | None = None
    with fewer_collections():
        while running and (stop_at is None or position < stop_at):
            notifications = following or read_page(log_app, position + 1, batch, stop_at)
            if not notifications:
                break
            position = notifications[-1].id
            at_end = stop_at is not None and position >= stop_at
            read_next = None if at_end else partial(read_page, log_app, position + 1, batch, stop_at)
            decode = PageDecoder(log_app.mapper.to_domain_event)
            following = apply_to_all(running, notifications, decode, progress, read_next)
            running = [lane for lane in running if lane.failure is None]


@contextlib.contextmanager
def fewer_collections(allocations: int = GC_ALLOCATIONS) -> Iterator[None]:
    """Runs Python's cyclic garbage collector after `allocations` new objects rather than 700 while inside.
    A page holds tens of thousands of live objects (events, rows, tuples to write), which every collection
    would scan again: a sixth of a rebuild's time with the default. Cycles are still collected."""
    threshold = gc.get_threshold()
    gc.set_threshold(allocations, *threshold[1:])
    try:
        yield
    finally:
        gc.set_threshold(*threshold)


def apply_to_all(
    lanes: Sequence[Lane],
    notifications: Sequence[Notification],
    decode: Decode,
    progress: Progress | None,
    read_next: Callable[[], list[Notification]] | None = None,
) -> list[Notification] | None:
    """Applies a page to every lane, their transactions open together, and returns what `read_next` reads
    (the next page, read while PostgreSQL writes this one). If anything fails, the lanes whose page did not
    commit apply it again one by one (`apply_page`), so the failing event is named; then None is returned."""
    pages = [(lane, page) for lane in lanes if (page := lane.unapplied(notifications))]
    committed: list[Lane] = []
    try:
        with contextlib.ExitStack() as stack:
            for lane, page in pages:
                stack.push(_on_commit(lane, page, committed, progress))  # runs after the lane's batch ends
                stack.enter_context(lane.view.batch(page))
                for notification in page:
                    lane.process(notification, decode)
                lane.view.end_batch()  # PostgreSQL writes it while the next lane's page is computed
            return read_next() if read_next is not None else None
    except Exception:
        for lane, page in pages:
            if lane not in committed:
                apply_alone(lane, page, decode, progress)
        return None


def _on_commit(
    lane: Lane, page: Sequence[Notification], committed: list[Lane], progress: Progress | None
) -> Callable[..., bool]:
    def ended(error_type: type[BaseException] | None, *_: Any) -> bool:
        if error_type is None:
            moved(lane, page, progress)
            committed.append(lane)
        return False  # an error goes on to the other lanes' batches, which roll back

    return ended


@contextlib.contextmanager
def rebuilding(
    url: str, specs: Sequence[ProjectionSpec]
) -> Iterator[tuple[list[Lane], list[ProjectionSpec]]]:
    """Lanes for the projections of `specs` that run nowhere else, each emptied (`reset`, side by side:
    each commits on its own connection) and holding its advisory lock on the connection its view writes on
    while inside; and the projections that run elsewhere (left as they are)."""
    with contextlib.ExitStack() as stack:
        views, busy = [], []
        for spec in specs:
            connection = stack.enter_context(locked(url, spec.lock_key(), f"rebuild {spec.name}"))
            if connection is None:
                busy.append(spec)
                continue
            view = open_view(url, spec, connection=connection)
            stack.callback(view.datastore.close)
            views.append((spec, view))
        with ThreadPoolExecutor(max(len(views), 1), thread_name_prefix="reset") as pool:
            list(pool.map(lambda opened: opened[1].reset(), views))
        yield [Lane(spec, view) for spec, view in views], busy
