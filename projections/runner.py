"""Running projections: live, one process at a time per projection (a PostgreSQL advisory lock elects it),
following the event log a page per transaction as NOTIFY wakes it; and replays from the first event for
rebuilds and audits, the same way."""

from __future__ import annotations

import functools
import hashlib
import inspect
import logging
import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from typing import Any

import psycopg
from eventsourcing.persistence import InfrastructureFactory, Notification, Tracking
from eventsourcing.projection import Projection
from eventsourcing.utils import Environment, resolve_topic
from psycopg import sql

from application.database import ensure_schema, eventsourcing_env
from application.log import EVENTS_SCHEMA, LedgerLog
from projections.postgres import READ_SCHEMA, ReadModel

log = logging.getLogger("broker_ledger.projections")
APPLICATION = LedgerLog.name
PROJECTION_POOL_SIZE = "1"
NOTIFY_WAIT_SECONDS = 0.5
PAGE = 500  # events per transaction, at most
PAGE_ENV = "BROKER_LEDGER_PROJECTION_PAGE"  # overrides PAGE for running projections
Decode = Callable[[Notification], Any]  # a stored event to its domain event (the application's mapper)
STARTUP_LOCK = int.from_bytes(
    hashlib.sha256(b"broker-ledger projections starting").digest()[:8], "big", signed=True
)


@dataclass(frozen=True)
class ProjectionSpec:
    """A projection, the view it writes, and the name it is known by (in the CLI and in table names)."""

    projection_class: type[Projection]
    view_class: type[ReadModel]

    @property
    def name(self) -> str:
        return self.projection_class.name

    def lock_key(self) -> int:
        digest = hashlib.sha256(f"broker-ledger projection {self.name}".encode()).digest()
        return int.from_bytes(digest[:8], "big", signed=True)


def projection_env(url: str, spec: ProjectionSpec, schema: str = READ_SCHEMA) -> dict[str, str]:
    """The event store's environment, with the projection's own tables in `schema`."""
    env = eventsourcing_env(url, EVENTS_SCHEMA)
    env[f"{spec.name.upper()}_POSTGRES_SCHEMA"] = schema
    # A projection needs few connections (its reads of the log, the view's writes; its LISTEN has one of its
    # own); pools are filled to their size when opened, and every API worker may run some projections.
    env.update(POSTGRES_POOL_SIZE=PROJECTION_POOL_SIZE, POSTGRES_MAX_OVERFLOW="1")
    return env


def open_view(
    url: str, spec: ProjectionSpec, schema: str = READ_SCHEMA, settings: dict[str, str] | None = None
) -> ReadModel:
    """The projection's view, for reading it or replaying into it (its tables are created if missing);
    `settings` overrides eventsourcing's (e.g. `POSTGRES_MAX_OVERFLOW` for a view that serves reads)."""
    ensure_schema(url, schema)
    env = Environment(spec.name, {**projection_env(url, spec, schema), **(settings or {})})
    with starting(url):  # one process at a time: concurrent CREATE ... IF NOT EXISTS can collide
        return InfrastructureFactory.construct(env=env).tracking_recorder(spec.view_class)


def replay(
    log_app: LedgerLog,
    spec: ProjectionSpec,
    view: ReadModel,
    *,
    stop_at: int | None = None,
    batch: int = PAGE,
    progress: Callable[[int], None] | None = None,
    interrupted: Callable[[], bool] = lambda: False,
) -> int:
    """Processes every event after the view's position (up to `stop_at`) in order; returns the position."""
    projection = spec.projection_class(view=view)
    position = view.position(APPLICATION)
    while (stop_at is None or position < stop_at) and not interrupted():
        notifications = log_app.recorder.select_notifications(start=position + 1, limit=batch, stop=stop_at)
        if not notifications:
            break
        with view.batch(notifications):  # the page commits at once, with its last position
            for notification in notifications:
                process(projection, notification, log_app.mapper.to_domain_event)
        position = notifications[-1].id
        if progress is not None:
            progress(len(notifications))
    return position


def process(projection: Projection[Any], notification: Notification, decode: Decode) -> None:
    """Hands one stored event to `projection`, decoded only if the projection does something with it: a
    projection of the stored rows (`process_stored`) decodes it itself if it must, and an event that
    `projection` only skips advances its position undecoded."""
    tracking = Tracking(APPLICATION, notification.id)
    process_stored = getattr(projection, "process_stored", None)
    if process_stored is not None:
        process_stored(notification, partial(decode, notification), tracking)
    elif handles(type(projection), notification.topic):
        projection.process_event(decode(notification), tracking)
    else:
        projection.view.skip(tracking)


@functools.cache
def handles(projection_class: type[Projection[Any]], topic: str) -> bool:
    """Whether `projection_class` does more than skip events of `topic`: it says so (`reads`), or its
    `process_event` dispatches on the event's class to more than its default (a singledispatchmethod)."""
    event_class = resolve_topic(topic)
    reads = getattr(projection_class, "reads", None)
    if reads is not None:
        return bool(reads(event_class))
    dispatcher = getattr(inspect.getattr_static(projection_class, "process_event"), "dispatcher", None)
    if dispatcher is None:
        return True
    return dispatcher.dispatch(event_class) is not dispatcher.dispatch(object)


@contextmanager
def exclusive(url: str, spec: ProjectionSpec) -> Iterator[bool]:
    """Holds the projection's advisory lock while inside, yielding whether it was free."""
    with psycopg.connect(url, autocommit=True) as conn:
        free = conn.execute("SELECT pg_try_advisory_lock(%s)", (spec.lock_key(),)).fetchone()[0]
        try:
            yield free
        finally:
            if free:
                conn.execute("SELECT pg_advisory_unlock(%s)", (spec.lock_key(),))


@contextmanager
def starting(url: str) -> Iterator[None]:
    """Holds the database-wide lock under which projections create their tables and start."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("SELECT pg_advisory_lock(%s)", (STARTUP_LOCK,))
        yield


class ProjectionWorker:
    """Keeps one projection running in this process while this process holds its advisory lock.

    Every API worker and every `projections run` process starts one per projection; the one that gets
    the lock runs the projection, the others wait and take over if it stops. A failure (a database
    restart, say) stops the runner; it is started again after a pause, resuming from its position.
    """

    def __init__(self, url: str, spec: ProjectionSpec, retry_seconds: float = 2.0) -> None:
        self.url = url
        self.spec = spec
        self.retry_seconds = retry_seconds
        self.page = int(os.environ.get(PAGE_ENV) or PAGE)
        self.running = threading.Event()  # set while this process runs the projection
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=f"projection-{spec.name}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopped.set()
        self._thread.join(timeout=15)

    def _loop(self) -> None:
        while not self._stopped.is_set():
            try:
                self._run_while_leader()
            except Exception:
                log.exception(
                    "projection %s failed; restarting in %.0f s", self.spec.name, self.retry_seconds
                )
            self.running.clear()
            self._stopped.wait(self.retry_seconds)

    def _run_while_leader(self) -> None:
        with exclusive(self.url, self.spec) as leader:
            if not leader:
                return
            view = open_view(self.url, self.spec)
            log_app = LedgerLog(env=projection_env(self.url, self.spec))
            try:
                self.running.set()
                log.info("projection %s running from position %d", self.spec.name, view.position())
                self._follow(log_app, view)
            finally:
                log_app.close()
                view.datastore.close()

    def _follow(self, log_app: LedgerLog, view: ReadModel) -> None:
        """Processes new events a page per transaction, woken by the event store's NOTIFY (or every
        half second, should a notification be missed)."""
        channel = sql.Identifier(log_app.recorder.channel_name)
        with psycopg.connect(self.url, autocommit=True) as listener:
            listener.execute(sql.SQL("LISTEN {}").format(channel))
            while not self._stopped.is_set():
                replay(log_app, self.spec, view, batch=self.page, interrupted=self._stopped.is_set)
                for _ in listener.notifies(timeout=NOTIFY_WAIT_SECONDS, stop_after=1):
                    pass
