"""Running projections: replays of one projection from its position, a page per transaction (audits,
tests, `projections replay`), and what every way of running them shares: the spec of a projection, its view
(`open_view`), a page applied in one transaction (`apply_page`) and an event handed to a projection
(`processor`). Live, the projections a process leads run together in one pass (`projections.live`); a
rebuild replays every projection in one pass too (`projections.rebuild`)."""

from __future__ import annotations

import functools
import hashlib
import inspect
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from typing import Any

import psycopg
from eventsourcing.persistence import InfrastructureFactory, Notification, Tracking
from eventsourcing.projection import Projection
from eventsourcing.utils import Environment, resolve_topic

from application.store.database import (
    PROJECTION_TIMEOUTS,
    ensure_schema,
    ensure_schema_on,
    eventsourcing_env,
    pool_settings,
)
from application.store.log import EVENTS_SCHEMA, LedgerLog
from projections.base.connection import lend, locked, unlock
from projections.base.postgres import READ_SCHEMA, ReadModel

APPLICATION = LedgerLog.name
PAGE = 500  # events per transaction, at most
Decode = Callable[[Notification], Any]  # a stored event to its domain event (the application's mapper)
STARTUP_LOCK = int.from_bytes(
    hashlib.sha256(b"broker-ledger projections starting").digest()[:8], "big", signed=True
)


class ProjectionFailed(Exception):
    """A projection could not apply the event at `notification_id`; nothing of that event was written."""

    def __init__(self, name: str, notification: Notification, cause: Exception) -> None:
        self.notification_id = notification.id
        super().__init__(
            f"{name} cannot apply notification {notification.id} ({notification.topic}): "
            f"{type(cause).__name__}: {cause}"
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
    # One connection, opened when used: a running projection's own is lent to its datastores instead
    # (`ProjectionWorker`), so this pool serves only rebuilds, audits and reads of the view.
    env.update(pool_settings(1, f"projection {spec.name}", timeouts=PROJECTION_TIMEOUTS))
    return env


def open_view(
    url: str,
    spec: ProjectionSpec,
    schema: str = READ_SCHEMA,
    settings: dict[str, str] | None = None,
    connection: psycopg.Connection[Any] | None = None,
    create_tables: bool = True,
) -> ReadModel:
    """The projection's view, for reading it or replaying into it (its tables are created if missing);
    `settings` overrides eventsourcing's (e.g. `POSTGRES_MAX_OVERFLOW` for a view that serves reads); with
    `connection`, the view uses that connection rather than a pool of its own, and so does its start (no
    other connection is opened). Without `create_tables`, nothing is created and no connection is opened:
    a view on servers that take no DDL (standbys, `BROKER_LEDGER_READ_DATABASE_URL`), whose tables the
    primary's view created."""
    env = Environment(spec.name, {**projection_env(url, spec, schema), **(settings or {})})
    if not create_tables:
        env["CREATE_TABLE"] = "no"
        return InfrastructureFactory.construct(env=env).tracking_recorder(spec.view_class)
    if connection is None:
        ensure_schema(url, schema)
        with psycopg.connect(url, autocommit=True) as conn, starting(conn):
            return InfrastructureFactory.construct(env=env).tracking_recorder(spec.view_class)
    env["CREATE_TABLE"] = "no"  # created below, on `connection`
    view = InfrastructureFactory.construct(env=env).tracking_recorder(spec.view_class)
    lend(connection, view.datastore)
    with starting(connection):
        ensure_schema_on(connection, schema)
        view.create_table()
    return view


def replay(
    log_app: LedgerLog,
    spec: ProjectionSpec,
    view: ReadModel,
    *,
    stop_at: int | None = None,
    batch: int = PAGE,
    progress: Callable[[int], None] | None = None,
    interrupted: Callable[[], bool] = lambda: False,
    position: int | None = None,
) -> int:
    """Processes every event after the view's position (up to `stop_at`) in order; returns the position.
    `position` is the view's, when the caller knows it (a runner holding the projection's lock: nobody else
    moves it), saving the query. A page shorter than `batch` was the end of the log: no query follows it to
    find nothing. An event the projection cannot apply stops it there: `ProjectionFailed` names the event,
    and the events before it are applied."""
    projection = spec.projection_class(view=view)
    if position is None:
        position = view.position(APPLICATION)
    while (stop_at is None or position < stop_at) and not interrupted():
        notifications = log_app.notifications(position + 1, batch, stop=stop_at)
        if not notifications:
            break
        apply_page(spec, projection, view, notifications, log_app.decoder)
        position = notifications[-1].id
        if progress is not None:
            progress(len(notifications))
        if len(notifications) < batch:
            break
    return position


def apply_page(
    spec: ProjectionSpec,
    projection: Projection[Any],
    view: ReadModel,
    notifications: Sequence[Notification],
    decode: Decode,
) -> None:
    """Applies a page of events in one transaction, with the last one's position. If the page fails, its
    events are applied again one per transaction, so the one that fails is named (`ProjectionFailed`) and
    those before it are kept (a transient failure, such as a lost connection, may pass the second time)."""
    try:
        with view.batch(notifications):  # the page commits at once, with its last position
            run = processor(projection)
            for notification in notifications:
                run(notification, decode)
    except Exception as error:
        if len(notifications) > 1:
            for notification in notifications:
                apply_page(spec, projection, view, [notification], decode)
            return
        raise ProjectionFailed(spec.name, notifications[0], error) from error


def process(projection: Projection[Any], notification: Notification, decode: Decode) -> None:
    """Hands one stored event to `projection`, decoded only if the projection does something with it: a
    projection of the stored rows (`process_stored`) decodes it itself if it must, and an event that
    `projection` only skips advances its position undecoded."""
    processor(projection)(notification, decode)


def processor(projection: Projection[Any]) -> Callable[[Notification, Decode], None]:
    """`process` for `projection`, with what does not change from one event to the next looked up once
    (a rebuild processes every event for every projection)."""
    projection_class = type(projection)
    process_stored = getattr(projection, "process_stored", None)
    skip = projection.view.skip

    def stored(notification: Notification, decode: Decode) -> None:
        process_stored(notification, partial(decode, notification), Tracking(APPLICATION, notification.id))

    def dispatched(notification: Notification, decode: Decode) -> None:
        tracking = Tracking(APPLICATION, notification.id)
        if handles(projection_class, notification.topic):
            event = decode(notification)
            handler(projection_class, type(event))(projection, event, tracking)
        else:
            skip(tracking)

    return dispatched if process_stored is None else stored


@functools.cache
def handles(projection_class: type[Projection[Any]], topic: str) -> bool:
    """Whether `projection_class` does more than skip events of `topic`: its `process_event` (a
    singledispatchmethod, see `projections`) dispatches the event's class to more than its default."""
    dispatcher = _dispatcher(projection_class)
    if dispatcher is None:
        return True
    event_class = resolve_topic(topic)
    return dispatcher.dispatch(event_class) is not dispatcher.dispatch(object)


@functools.cache
def handler(projection_class: type[Projection[Any]], event_class: type) -> Callable[..., None]:
    """What `projection.process_event(event, tracking)` runs for an event of `event_class`, as a function
    of (projection, event, tracking): the registered method itself, found once rather than at every call
    (a singledispatchmethod makes a new bound method each time it is looked up)."""
    dispatcher = _dispatcher(projection_class)
    if dispatcher is None:
        return lambda projection, event, tracking: projection.process_event(event, tracking)
    return dispatcher.dispatch(event_class)


def _dispatcher(projection_class: type[Projection[Any]]) -> Any:
    method = inspect.getattr_static(projection_class, "process_event")
    if getattr(method, "dispatcher", None) is not None:
        method.__get__(None, projection_class)  # registers what eventsourcing deferred (see its dispatch)
    return getattr(method, "dispatcher", None)


@contextmanager
def exclusive(url: str, spec: ProjectionSpec) -> Iterator[bool]:
    """Holds the projection's advisory lock while inside, yielding whether it was free."""
    with locked(url, spec.lock_key(), f"lock {spec.name}") as connection:
        yield connection is not None


@contextmanager
def starting(conn: psycopg.Connection[Any]) -> Iterator[None]:
    """Holds, on `conn` (autocommit), the database-wide lock under which projections create their tables
    and start: one process at a time, as concurrent CREATE ... IF NOT EXISTS can collide."""
    conn.execute("SELECT pg_advisory_lock(%s)", (STARTUP_LOCK,))
    try:
        yield
    finally:
        unlock(conn, STARTUP_LOCK)
