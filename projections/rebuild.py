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

So a rebuild can use more cores (`rebuild_apart`, `projections rebuild --processes N`): the projections are
split into N groups (catalog index k to group k % N), each rebuilt by a process of its own (spawned: a fresh
interpreter, which opens its own connections and takes its group's locks) in the one pass above over its
group's lanes. Each process reads and decodes the whole log for its group: a page is read N times rather than
once, for N cores computing rows. They report, through a queue, when they start a projection, every page a
projection commits, and what they did (`Rebuilt`: position, failure) or which projections ran elsewhere; a
process that ends without its report failed its group. It pays where cores are to spare: on a machine of two
cores, where PostgreSQL needs one, two processes rebuilt 60,000 events 0 to 20 % faster than one, and 20,000
a little slower (each process's start, about half a second, and its own reading of the log cost more than
the second core gives): so by default a process per projection, up to one per two cores (`rebuild_processes`).

A rebuild empties its tables with TRUNCATE, which waits for every lock on them, an analyst's `LOCK TABLE ...
IN ACCESS SHARE MODE` or open transaction included. So it waits at most `RESET_LOCK_SECONDS` for them; then
it ends the analysts' sessions that hold a lock on its tables (`analyst_watch.end_lock_holders`) and tries
again, for at most the connection's lock timeout (`PROJECTION_TIMEOUTS`) in all: a rebuild whose tables other
sessions keep locked fails then, as it did before, rather than wait for ever.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import multiprocessing
import os
import queue
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from multiprocessing.process import BaseProcess
from typing import Any

import psycopg
from eventsourcing.persistence import Notification

from application.store.database import PROJECTION_TIMEOUTS, eventsourcing_env
from application.store.log import EVENTS_SCHEMA, LedgerLog
from projections.analyst_watch import end_lock_holders
from projections.base.connection import locked
from projections.base.postgres import ReadModel
from projections.base.runner import Decode, ProjectionSpec, open_view
from projections.catalog import by_name
from projections.lanes import Lane, PageDecoder, Progress, apply_alone, moved, read_page

GC_ALLOCATIONS = 100_000  # see `fewer_collections`
CORES_PER_PROCESS = 2  # see `rebuild_processes`
REBUILD_PAGE = 5000  # events read and written per transaction by a rebuild (a live page: `runner.PAGE`)
SILENT_SECONDS = 0.5  # how long the queue may stay empty before the processes' ends are looked at
STOP_SECONDS = 15.0  # how long a process that has reported may take to end before it is killed
RESET_LOCK_SECONDS = 1.0  # how long a rebuild's TRUNCATE waits for its locks before it ends analysts' holds
log = logging.getLogger("broker_ledger.projections")


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
            decode = PageDecoder(log_app.decoder)
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
            views.append((spec, view, connection))
        with ThreadPoolExecutor(max(len(views), 1), thread_name_prefix="reset") as pool:
            list(pool.map(lambda opened: reset(opened[1], opened[2]), views))
        yield [Lane(spec, view) for spec, view, _ in views], busy


def reset(view: ReadModel, connection: psycopg.Connection[Any]) -> None:
    """Empties `view` (`reset`, on `connection`, its own) without waiting behind an analyst (see above)."""
    tables = [view.table(name).as_string(connection) for name in view.tables]
    patience = time.monotonic() + PROJECTION_TIMEOUTS.lock
    with lock_timeout(connection, RESET_LOCK_SECONDS):
        while True:
            try:
                view.reset()
                return
            except Exception as error:
                if not _lock_timed_out(error) or time.monotonic() > patience:
                    raise
                ended = end_lock_holders(connection, tables)
                log.info(
                    "emptying %s: waited %.0f s for locks; ended %d analysts' sessions that held them",
                    ", ".join(tables),
                    RESET_LOCK_SECONDS,
                    len(ended),
                )


@contextlib.contextmanager
def lock_timeout(connection: psycopg.Connection[Any], seconds: float) -> Iterator[None]:
    """`connection`'s session waits at most `seconds` for a lock while inside."""
    row = connection.execute("SELECT current_setting('lock_timeout') AS value").fetchone()
    before = row["value"] if isinstance(row, dict) else row[0]
    connection.execute("SELECT set_config('lock_timeout', %s, false)", (f"{round(seconds * 1000)}ms",))
    try:
        yield
    finally:
        connection.execute("SELECT set_config('lock_timeout', %s, false)", (before,))


def _lock_timed_out(error: BaseException | None) -> bool:
    """Whether `error` or one it was raised from is a lock timeout (eventsourcing wraps psycopg's errors)."""
    while error is not None:
        if isinstance(error, psycopg.errors.LockNotAvailable):
            return True
        error = error.__cause__ or error.__context__
    return False


@dataclass(frozen=True)
class Rebuilt:
    """What a rebuild did to one projection: its position, and what stopped it there, if anything."""

    name: str
    position: int
    failure: str | None = None

    @classmethod
    def of(cls, lane: Lane) -> Rebuilt:
        return cls(lane.spec.name, lane.position, None if lane.failure is None else str(lane.failure))


def rebuild_processes(projections: int) -> int:
    """`rebuild`'s processes by default: one per projection, up to one per CORES_PER_PROCESS cores (PostgreSQL
    writes what they compute: on 2 cores a second process costs more CPU than it saves time)."""
    return max(1, min(projections, (os.cpu_count() or 1) // CORES_PER_PROCESS))


def groups(specs: Sequence[ProjectionSpec], processes: int) -> list[list[ProjectionSpec]]:
    """`specs` in `processes` groups (none empty): the projection at index k goes to group k % processes."""
    count = max(1, min(processes, len(specs)))
    return [list(specs[index::count]) for index in range(count)]


def rebuild_apart(
    url: str,
    specs: Sequence[ProjectionSpec],
    processes: int,
    *,
    starting: Callable[[str], None],
    progress: Progress,
) -> tuple[list[Rebuilt], list[ProjectionSpec]]:
    """Rebuilds `specs` in `processes` processes, a group each (see above); calls `starting(name)` when a
    process starts rebuilding a projection and `progress(name, events)` as its pages commit, both in this
    thread. Returns what was rebuilt, and the projections that run elsewhere (left as they are)."""
    context = multiprocessing.get_context("spawn")
    reports = context.Queue()
    split = groups(specs, processes)
    children = [
        context.Process(
            target=rebuild_group,
            args=(url, [spec.name for spec in group], index, reports),
            name=f"rebuild {index + 1} of {len(split)}",
            daemon=True,  # ended with this process, should it end first
        )
        for index, group in enumerate(split)
    ]
    try:
        for child in children:
            child.start()
        done = _follow_reports(reports, children, starting, progress)
    except BaseException:
        for child in children:
            if child.is_alive():
                child.terminate()  # its page rolls back; a rebuild resumes from each projection's position
        raise
    finally:
        _end(children)
    rebuilt: list[Rebuilt] = []
    busy: list[ProjectionSpec] = []
    for index, group in enumerate(split):
        if index not in done:
            rebuilt += [_unreported(spec, children[index]) for spec in group]
            continue
        rebuilt += done[index][0]
        busy += [by_name(name) for name in done[index][1]]
    return rebuilt, busy


def _follow_reports(
    reports: Any, children: list[BaseProcess], starting: Callable[[str], None], progress: Progress
) -> dict[int, tuple[list[Rebuilt], list[str]]]:
    """Hands the processes' reports on until each has said what it did, or has ended without saying it:
    one found ended when the queue was empty, and again when it was empty next (what it put on the queue
    before it ended has been read by then)."""
    done: dict[int, tuple[list[Rebuilt], list[str]]] = {}
    given_up: set[int] = set()
    ended_before: set[int] = set()
    while len(done) + len(given_up) < len(children):
        try:
            kind, *details = reports.get(timeout=SILENT_SECONDS)
        except queue.Empty:
            ended = {i for i, child in enumerate(children) if i not in done and child.exitcode is not None}
            given_up |= ended & ended_before
            ended_before = ended
            continue
        if kind == "starting":
            starting(details[0])
        elif kind == "progress":
            progress(details[0], details[1])
        else:
            index, rebuilt, busy = details
            done[index] = (rebuilt, busy)
    return done


def _unreported(spec: ProjectionSpec, child: BaseProcess) -> Rebuilt:
    failure = f"{spec.name}: the rebuild process ({child.name}) ended with exit code {child.exitcode}"
    return Rebuilt(spec.name, 0, failure + " before it reported (see its error above)")


def _end(children: list[BaseProcess]) -> None:
    """Waits for each process to end (it has reported, or has been told to stop), killing one that takes
    longer than STOP_SECONDS."""
    for child in children:
        if child.pid is None:
            continue  # never started
        child.join(STOP_SECONDS)
        if child.exitcode is None:
            child.kill()
            child.join()


def rebuild_group(url: str, names: list[str], index: int, reports: Any) -> None:
    """A process's part of `rebuild_apart` (its target): the projections `names` rebuilt in one pass over
    the log, on connections of its own, reported on `reports` as group `index`."""
    specs = [by_name(name) for name in names]
    log_app = LedgerLog(env=eventsourcing_env(url, EVENTS_SCHEMA))
    try:
        with rebuilding(url, specs) as (lanes, busy):
            for lane in lanes:
                reports.put(("starting", lane.spec.name))
            replay_all(log_app, lanes, progress=lambda name, events: reports.put(("progress", name, events)))
            rebuilt = [Rebuilt.of(lane) for lane in lanes]
    finally:
        log_app.close()
    reports.put(("done", index, rebuilt, [spec.name for spec in busy]))
