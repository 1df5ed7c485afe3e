"""Live projections: every projection a process leads, in one thread, on one connection, one page at a time.

Every API worker starts one `ProjectionWorker` for the catalog's projections, and so does every runner of
`projections run` (by default one, in that process itself; `--processes N` starts N runner processes, each
with its worker: see `interface.cli.projections`). A worker holds one connection for all it leads, and opens
another for a moment when it records a failure (`status.record_failure`): N runners hold N. A projection
runs in one process of the cluster at a time: the one whose connection holds its advisory lock. Every
`retry_seconds` a worker looks at the locks of those it does not lead, so it takes over a projection that
stops elsewhere.

Which locks a worker tries is its `Share`. An API worker's (the default, runner 0 of 1) prefers every
projection: it tries every free lock at every look, so the first process to start leads them all. Runner i of
N prefers the projections at catalog index k with k % N == i, and tries those at every look; the others' it
tries only once it has found them free (no session holds them, `pg_locks`) on two looks in a row. So a
runner that starts a moment after another (less than `retry_seconds` later) still finds its own free, the
projections spread over the runners, and a dead runner's are taken over by the others within two looks
(2 to 4 s by default). A runner holds, while connected, an advisory lock that says it is alive
(`Share.presence_key`); at each look, a runner that leads a projection taken over lets it go once that
projection's own runner is alive again, and that runner takes it at its next look: the projections spread
again by themselves after a runner restarts, or when a runner started late.

Woken by the event store's NOTIFY (or every `NOTIFY_WAIT_SECONDS`, should one be missed), a round reads the
new page of the log once, decodes each event at most once (`lanes.PageDecoder`), and hands it to every
projection led: their rows and their positions are written in ONE transaction, in pipeline mode, on the
shared connection (`apply_together`). If the round fails, each projection applies the page alone
(`lanes.apply_alone`: a transaction of its own, then event by event), so the others' pages commit and
the failing event is named. The projection that failed is recorded in `read.projection_status`
(`projections.status`) while its lock is still held, let go, and taken again after a pause that doubles
with each failure in a row (at most `MAX_RETRY_SECONDS`), from its position: it never skips the event.
Once it applies events again, the record is deleted. A lost connection fails every projection led; the
worker connects again after a pause.

A steady trickle of writes would make every NOTIFY a round of one or two buys, each paying a round's fixed
cost (a read of the log, a transaction, a statement or two per projection): the NOTIFY of the next commit
is often there before a round ends, so waiting for it does not space the rounds. So after a round of fewer
than `SMALL_ROUND` events, the next starts no sooner than `ROUND_SECONDS` after it started, and gathers what
was stored meanwhile. A write after a quiet spell is read at once (the last round started long before), and
a busy worker (rounds of `SMALL_ROUND` events or more) reads at once, so the pacing never lets it fall behind.

Between rounds, on the same connection, a worker holds the analysts' sessions to their limits, once a second
(`projections.analyst_watch`), and, while it leads the Merkle tree, signs a checkpoint of it when one is due
(`projections.checkpoints.Checkpointer`, handed in by the composition root).
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import psycopg
from eventsourcing.persistence import Notification
from psycopg import sql

from application.store.database import PROJECTION_TIMEOUTS, eventsourcing_env, pool_settings
from application.store.log import EVENTS_SCHEMA, LedgerLog
from projections import status
from projections.analyst_watch import AnalystWatch
from projections.base.connection import connect, lend, try_lock, unlock
from projections.base.runner import PAGE, Decode, ProjectionFailed, ProjectionSpec, open_view
from projections.checkpoints import Checkpointer
from projections.lanes import Lane, PageDecoder, apply_alone, moved, read_page

log = logging.getLogger("broker_ledger.projections")
NOTIFY_WAIT_SECONDS = 0.5
SMALL_ROUND = 32
ROUND_SECONDS = 0.02
MAX_RETRY_SECONDS = 30.0  # a failing projection is retried after 2, 4, 8, ... s, at most this long
PAGE_ENV = "BROKER_LEDGER_PROJECTION_PAGE"  # overrides PAGE for running projections (interface.environment)
CONNECTION_NAME = "projections"  # `broker-ledger projections` in pg_stat_activity
HELD_LOCKS = (
    "SELECT (classid::bigint << 32) | objid::bigint AS key FROM pg_locks"
    " WHERE locktype = 'advisory' AND objsubid = 1 AND granted"
    " AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
)


@dataclass(frozen=True)
class Share:
    """Which projections a worker prefers (see above): runner `index` of `runners` prefers those at catalog
    index k with k % runners == index. Runner 0 of 1, the default, prefers every one."""

    index: int = 0
    runners: int = 1

    def __post_init__(self) -> None:
        if not 0 <= self.index < self.runners:
            raise ValueError(f"runner {self.index} of {self.runners}: give 0 <= index < runners")

    def prefers(self, catalog_index: int) -> bool:
        return catalog_index % self.runners == self.index

    def owner(self, catalog_index: int) -> Share:
        """The runner that prefers the projection at `catalog_index`."""
        return Share(catalog_index % self.runners, self.runners)

    def presence_key(self) -> int:
        """The advisory lock a runner of this share holds while it is connected: its sign of life, by which
        a runner that took its projections over hands them back."""
        digest = hashlib.sha256(f"broker-ledger projections {self}".encode()).digest()
        return int.from_bytes(digest[:8], "big", signed=True)

    def __str__(self) -> str:
        return f"runner {self.index} of {self.runners}"


@dataclass
class Standing:
    """What a worker remembers of one projection across its leads: failures in a row, and when it may be
    taken again."""

    failures: int = 0
    retry_at: float = 0.0


class ProjectionWorker:
    """Runs, in this process, every projection of `specs` whose advisory lock it holds (see above), reading
    the log `page` events at a time (BROKER_LEDGER_PROJECTION_PAGE, handed in by the composition root)."""

    def __init__(
        self,
        url: str,
        specs: Iterable[ProjectionSpec],
        retry_seconds: float = 2.0,
        share: Share = Share(),
        page: int = PAGE,
        checkpointer: Checkpointer | None = None,
    ) -> None:
        self.url = url
        self.checkpointer = checkpointer
        self.specs = tuple(specs)
        self.retry_seconds = retry_seconds
        self.share = share
        self.preferred = frozenset(spec.name for k, spec in enumerate(self.specs) if share.prefers(k))
        self.page = page
        self.running = threading.Event()  # set while this process runs every projection of `specs`
        self.led: frozenset[str] = frozenset()  # the names of the projections led now (for tests, logs)
        self.standing = {spec.name: Standing() for spec in self.specs}
        self._lanes: dict[str, Lane] = {}  # the projections led, by name
        self._free_before: frozenset[str] = frozenset()  # others' projections found free at the last look
        self._uncleared: set[str] = set()  # led projections whose failure may still be on record
        self._look_at = 0.0  # when to try the locks of the projections not led
        self.analysts = AnalystWatch()  # holds the analysts to their limits (`projections.analyst_watch`)
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="projections", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self.stop_soon()
        self._thread.join(timeout=15)

    def stop_soon(self) -> None:
        """Asks the worker to stop after its round (or its wait for a notification, at most
        `NOTIFY_WAIT_SECONDS`) without waiting for it."""
        self._stopped.set()

    def pause(self, failures: int) -> float:
        """Seconds to wait after `failures` in a row before the next attempt."""
        if not failures:
            return self.retry_seconds
        return min(self.retry_seconds * 2 ** (failures - 1), max(MAX_RETRY_SECONDS, self.retry_seconds))

    def _loop(self) -> None:
        lost = 0  # connections failed in a row
        while not self._stopped.is_set():
            try:
                self._connected()
                lost = 0
            except Exception:
                lost += 1
                log.exception(
                    "projections: the connection failed (%d in a row); connecting again in %.0f s",
                    lost,
                    self.pause(lost),
                )
            self.running.clear()
            self._stopped.wait(self.pause(lost))

    def _connected(self) -> None:
        self._free_before = frozenset()  # looked at on the connection before: look twice again
        with connect(self.url, CONNECTION_NAME) as connection:
            if self.share.runners > 1:  # a sign of life for those holding its projections (held till closed)
                try_lock(connection, self.share.presence_key())
            log_app = event_log(self.url, connection)
            try:
                self._follow(connection, log_app)
            except Exception as error:
                for lane in list(self._lanes.values()):
                    self._failed(lane.spec, error, connection)
                raise
            finally:
                for lane in list(self._lanes.values()):
                    self._let_go(lane.spec, connection)
                log_app.close()

    def _follow(self, connection: psycopg.Connection[Any], log_app: LedgerLog) -> None:
        """Rounds until stopped, LISTENing while it leads a projection (a connection that never reads its
        notifications would hold back PostgreSQL's queue of them)."""
        channel = sql.Identifier(log_app.notify_channel)
        listening = False
        while not self._stopped.is_set():
            self._take_free(connection)
            self.analysts.look(connection)
            self._checkpoint(connection)
            if bool(self._lanes) != listening:
                listening = not listening
                connection.execute(sql.SQL("LISTEN {}" if listening else "UNLISTEN {}").format(channel))
            if not self._lanes:
                self._stopped.wait(max(min(self._look_at, self.analysts.next_look) - time.monotonic(), 0))
                continue
            started = time.monotonic()
            self._wait(connection, self._rounds(connection, log_app), started)

    def _rounds(self, connection: psycopg.Connection[Any], log_app: LedgerLog) -> int:
        """Applies the new events to every projection led, a page per round; returns how many it read."""
        read = 0
        while self._lanes and not self._stopped.is_set():
            lanes = list(self._lanes.values())
            start = min(lane.position for lane in lanes) + 1
            notifications = read_page(log_app, start, self.page, None)
            if notifications:
                apply_together(connection, lanes, notifications, PageDecoder(log_app.decoder))
            self._settle(connection, lanes)
            self.analysts.look(connection)  # also while it catches up a long way
            self._checkpoint(connection)
            read += len(notifications)
            if len(notifications) < self.page:
                break
        return read

    def _checkpoint(self, connection: psycopg.Connection[Any]) -> None:
        """A signed checkpoint of the Merkle tree, if this worker leads it and one is due; a failure is logged
        (the next look tries again), never the projections' own."""
        checkpointer = self.checkpointer
        if checkpointer is None or checkpointer.follows not in self._lanes:
            return
        try:
            checkpointer.look(connection)
        except psycopg.OperationalError:
            raise  # the connection is lost: the worker connects again
        except Exception:
            log.exception("projections: the Merkle tree's checkpoint could not be made")

    def _wait(self, connection: psycopg.Connection[Any], read: int, started: float) -> None:
        """Waits for a NOTIFY, then, after a small round (`read` events) that `started` then, until
        `ROUND_SECONDS` after it (see above); the next round reads whatever the notifications drained here
        told of: a commit after them sends a NOTIFY of its own."""
        timeout = NOTIFY_WAIT_SECONDS
        if len(self._lanes) < len(self.specs) or self.share.runners > 1:  # not past the next look
            timeout = min(timeout, max(self._look_at - time.monotonic(), 0.0))
        notified = any(True for _ in connection.notifies(timeout=timeout, stop_after=1))
        if notified and read < SMALL_ROUND:
            self._stopped.wait(max(started + ROUND_SECONDS - time.monotonic(), 0.0))
        for _ in connection.notifies(timeout=0):
            pass

    def _take_free(self, connection: psycopg.Connection[Any]) -> None:
        """Takes the lock of each projection not led here whose pause is over, when it is time to look: of
        one it prefers, at every look; of another, once found free at this look and the one before."""
        now = time.monotonic()
        sharing = self.share.runners > 1
        if now < self._look_at or (len(self._lanes) == len(self.specs) and not sharing):
            return
        self._look_at = now + self.retry_seconds
        held = held_locks(connection) if sharing else set()
        self._hand_back(connection, held)
        free_twice = self._free_twice(held)
        for spec in self.specs:
            standing = self.standing[spec.name]
            if spec.name in self._lanes:
                continue
            if standing.retry_at > now:
                self._look_at = min(self._look_at, standing.retry_at)
            elif (spec.name in self.preferred or spec.name in free_twice) and try_lock(
                connection, spec.lock_key()
            ):
                self._lead(spec, connection)
        if len(self._lanes) == len(self.specs):
            self.running.set()

    def _hand_back(self, connection: psycopg.Connection[Any], held: set[int]) -> None:
        """Lets go of each projection taken over whose own runner is alive again (its presence lock is held,
        `held`): that runner takes it at its next look."""
        for index, spec in enumerate(self.specs):
            owner = self.share.owner(index)
            if spec.name in self._lanes and owner != self.share and owner.presence_key() in held:
                log.info("%s hands projection %s back to %s", self.share, spec.name, owner)
                self._let_go(spec, connection)

    def _free_twice(self, held: set[int]) -> frozenset[str]:
        """The projections not preferred nor led here whose locks no session held (`held`) at this look nor
        at the one before (none for a worker that prefers every projection)."""
        others = [s for s in self.specs if s.name not in self.preferred and s.name not in self._lanes]
        free = frozenset(spec.name for spec in others if spec.lock_key() not in held)
        free_twice, self._free_before = free & self._free_before, free
        return free_twice

    def _lead(self, spec: ProjectionSpec, connection: psycopg.Connection[Any]) -> None:
        try:
            lane = Lane(spec, open_view(self.url, spec, connection=connection))
        except Exception as error:
            self._failed(spec, error, connection)
            return
        self._lanes[spec.name] = lane
        self.led = frozenset(self._lanes)
        self._uncleared.add(spec.name)
        if self.share.runners == 1:
            log.info("projection %s running from position %d", spec.name, lane.position)
            return
        whose = "its own" if spec.name in self.preferred else "taken over"
        log.info(
            "%s (pid %d) leads projection %s (%s) from position %d",
            self.share,
            os.getpid(),
            spec.name,
            whose,
            lane.position,
        )

    def _settle(self, connection: psycopg.Connection[Any], lanes: Sequence[Lane]) -> None:
        """After a round: a lane that failed is let go; the others' failures in a row are over."""
        for lane in lanes:
            name = lane.spec.name
            if lane.failure is not None:
                self._failed(lane.spec, lane.failure, connection)
                continue
            self.standing[name].failures = 0
            if name in self._uncleared:
                status.clear_failure(connection, name)
                self._uncleared.discard(name)

    def _failed(self, spec: ProjectionSpec, error: Exception, connection: psycopg.Connection[Any]) -> None:
        """Records the failure while the projection's lock is held (a successor's success is not
        overwritten), then lets the projection go until its pause is over."""
        standing = self.standing[spec.name]
        standing.failures += 1
        pause = self.pause(standing.failures)
        standing.retry_at = time.monotonic() + pause
        self._look_at = min(self._look_at, standing.retry_at)
        log.error(
            "projection %s failed (%d in a row); restarting in %.0f s",
            spec.name,
            standing.failures,
            pause,
            exc_info=error,
        )
        self._record(spec, error)
        self._let_go(spec, connection)

    def _let_go(self, spec: ProjectionSpec, connection: psycopg.Connection[Any]) -> None:
        """Stops running the projection here and releases its lock."""
        lane = self._lanes.pop(spec.name, None)
        self.led = frozenset(self._lanes)
        self._uncleared.discard(spec.name)
        self.running.clear()
        if lane is not None:
            lane.view.datastore.close()
        unlock(connection, spec.lock_key())

    def _record(self, spec: ProjectionSpec, error: Exception) -> None:
        notification_id = error.notification_id if isinstance(error, ProjectionFailed) else None
        message = str(error) if isinstance(error, ProjectionFailed) else f"{type(error).__name__}: {error}"
        try:
            status.record_failure(self.url, spec.name, message, notification_id)
        except Exception:
            log.exception("could not record the failure of projection %s", spec.name)


def held_locks(connection: psycopg.Connection[Any]) -> set[int]:
    """The advisory locks (of one bigint key) that some session of this database holds: a bigint key is in
    `pg_locks` as its high half (classid) and its low half (objid), objsubid 1."""
    rows = connection.execute(HELD_LOCKS).fetchall()
    return {row["key"] for row in rows}


def event_log(url: str, connection: psycopg.Connection[Any]) -> LedgerLog:
    """The event log, read on `connection` (its table created there if missing): a worker opens no other."""
    env = {
        **eventsourcing_env(url, EVENTS_SCHEMA),
        **pool_settings(1, CONNECTION_NAME, timeouts=PROJECTION_TIMEOUTS),
        "CREATE_TABLE": "no",
    }
    log_app = LedgerLog(env=env)
    lend(connection, log_app.datastore)
    log_app.create_table()
    return log_app


def apply_together(
    connection: psycopg.Connection[Any],
    lanes: Sequence[Lane],
    notifications: Sequence[Notification],
    decode: Decode,
) -> None:
    """Applies a page to every lane in ONE transaction on `connection` (lent to every lane's view), each
    lane's rows with its position. Every lane computes its page (its reads wait for no other lane's writes)
    before any lane sends its last writes and position (`end_batch`); the positions are checked at the end.
    If anything fails, each lane applies the page alone (`apply_alone`): a lane that cannot apply an event
    stops there (`Lane.failure`) and the others' pages commit."""
    pages = [(lane, page) for lane in lanes if (page := lane.unapplied(notifications))]
    try:
        with connection.pipeline(), connection.transaction(), contextlib.ExitStack() as batches:
            for lane, page in pages:
                batches.enter_context(lane.view.batch(page, joined=True))
                for notification in page:
                    lane.process(notification, decode)
            for lane, _ in pages:  # after every lane's reads: none of them waits for another's writes
                lane.view.end_batch()
    except Exception:
        for lane, page in pages:
            apply_alone(lane, page, decode, None)
        return
    for lane, page in pages:
        moved(lane, page, None)


def stop_all(workers: Iterable[ProjectionWorker]) -> None:
    """Stops every worker, all at once: each waits out its own notification wait, side by side."""
    workers = list(workers)
    for worker in workers:
        worker.stop_soon()
    for worker in workers:
        worker.stop()
