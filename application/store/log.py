"""The ledger's event log as an application of its own: what projections subscribe to and auditors replay.

`LedgerLog` knows how the domain's events are stored (its name, hence its table `ledger_events`; its mapper,
`EventCodecMapper`, named as the default `MAPPER_TOPIC`; the transcodings of the value objects, with which
events of the first format are read) and nothing of the use cases, so it can be built from an environment
alone, as eventsourcing's projection runner does.

It is also the one door to the log for whoever holds it (the projections, the command line, the app's health
and metrics): each read they need is a method here, so nothing outside `application/store/` reaches into the
library's repository, recorder or mapper (the use cases read through `LedgerStore`, which asks this).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any
from uuid import UUID

from eventsourcing.application import Application, project_aggregate
from eventsourcing.domain import BaseAggregate
from eventsourcing.persistence import JSONTranscoder, Notification, Recording
from eventsourcing.postgres import PostgresDatastore
from eventsourcing.utils import get_topic

from application.store.actors import stamp
from application.store.msgspec_mapper import EventCodecMapper, decode_state
from application.store.read_ahead import notifications_page
from application.store.transcodings import register_value_objects

EVENTS_SCHEMA = "ledger"
Decode = Callable[[Notification], Any]  # a stored event (or notification) to its domain event

__all__ = ["EVENTS_SCHEMA", "Decode", "LedgerLog", "Notification"]


class LedgerLog(Application):
    name = "Ledger"
    # events are written by msgspec and decoded into their typed fields (application/store/msgspec_mapper.py)
    env = {"MAPPER_TOPIC": get_topic(EventCodecMapper)}

    def save(self, *objs: Any, **kwargs: Any) -> list[Recording]:
        """The library's save, by its public parts. Its own `save` collects an aggregate's events only after
        checking it against two `typing.Protocol` classes (`ProcessingEvent.collect_events`), and on Python
        3.11 such an `isinstance` walks the protocol's members on every call (about 0.1 ms of a created buy,
        which saves three aggregates). So when every object is an aggregate (told by its class) and the
        repository keeps no cache, this override of the public `save` does what the library's does with its
        public parts, in its order: the events collected (each stamped with the save's actor,
        `application.store.actors`), put in the event store (`events.put`, what its
        `_record` calls; `kwargs`, such as a request's writes, go with them to the recorder), then a snapshot
        taken at each of `snapshotting_intervals` (`take_snapshot`, what its `_take_snapshots` calls). Its
        after-save hooks (`_notify`, the deprecated `notify`) do nothing in the library and are overridden by
        no class of ours, so they are not called: a subclass that overrides one must call it here. Anything
        else (a bare event, None, a repository with a cache) is the library's own save."""
        if self.repository.cache is not None or not all(isinstance(obj, BaseAggregate) for obj in objs):
            return super().save(*objs, **kwargs)  # no actor: no use case of ours saves other objects
        events = [event for aggregate in objs for event in aggregate.collect_events()]
        unit = kwargs.get("unit")
        stamp(events, unit.actor if unit is not None else None)
        recordings = self.events.put(events, **kwargs)
        if self.snapshots is not None and self.snapshotting_intervals:
            self._snapshot_when_due(objs, events)
        return recordings

    def _snapshot_when_due(self, aggregates: Sequence[BaseAggregate], events: list[Any]) -> None:
        """A snapshot of each saved aggregate whose class has an interval, at each new version that is a
        multiple of it: the library's rule (its `_take_snapshots`), with its public `take_snapshot`."""
        by_id = {aggregate.id: aggregate for aggregate in aggregates}
        for event in events:
            kind = type(by_id[event.originator_id])
            interval = self.snapshotting_intervals.get(kind)
            if interval is not None and event.originator_version % interval == 0:
                projector = self.snapshotting_projectors.get(kind, project_aggregate)
                self.take_snapshot(event.originator_id, event.originator_version, projector)

    def register_transcodings(self, transcoder: JSONTranscoder) -> None:
        super().register_transcodings(transcoder)
        register_value_objects(transcoder)

    # The door to the log: what is read of it, by name.

    def events_of(self, aggregate_id: UUID) -> list[Any]:
        """Every event of the aggregate, oldest first, from its first (no snapshot); none if it has none."""
        return list(self.repository.event_store.get(aggregate_id))

    def aggregate_at(self, aggregate_id: UUID, version: int) -> Any:
        """The aggregate as its events up to `version` left it."""
        return self.repository.get(aggregate_id, version=version)

    def histories_of(self, ids: Sequence[UUID]) -> dict[UUID, list[Any]]:
        """The whole histories of these aggregates, oldest event first, every id a key (with the ledger's
        recorder in one query): what an `asOf` replays up to its instant."""
        recorder = self.recorder
        if not ids or not hasattr(recorder, "select_events_of"):
            return {aggregate_id: self.events_of(aggregate_id) for aggregate_id in ids}
        histories: dict[UUID, list[Any]] = {aggregate_id: [] for aggregate_id in ids}
        decode = self.mapper.to_domain_event
        for stored in recorder.select_events_of(ids):
            histories[stored.originator_id].append(decode(stored))
        return histories

    def notifications(
        self, start: int, limit: int, *, stop: int | None = None, topics: Sequence[str] = ()
    ) -> Sequence[Notification]:
        """At most `limit` stored events from notification id `start` on (up to `stop`; of `topics` only,
        when named), in the log's order: the library's `select_notifications`."""
        return self.recorder.select_notifications(start=start, limit=limit, stop=stop, topics=topics)

    def page(self, start: int, limit: int, stop: int | None = None) -> list[Notification]:
        """`notifications` for the projections' passes over the log: rows read as tuples, a page of a rebuild
        being thousands of rows (PostgreSQL only)."""
        return notifications_page(self.recorder, start, limit, stop)

    @property
    def decoder(self) -> Decode:
        """The mapper's decoding of a stored event into its domain event. A caller that decodes many takes it
        once (a bound method: nothing added per event)."""
        return self.mapper.to_domain_event

    def state_of(self, topic: str, state: bytes) -> dict[str, Any]:
        """A stored state's fields as decoded values, whichever format holds them, without ids or upcasting
        (`audit export`'s lines)."""
        return decode_state(self.mapper, topic, state)

    def head(self) -> int:
        """The log's last notification id, 0 while it is empty."""
        return self.recorder.max_notification_id() or 0

    @property
    def notify_channel(self) -> str:
        """The channel the store NOTIFYs on each recording, which a projection worker LISTENs to."""
        return self.recorder.channel_name

    @property
    def datastore(self) -> PostgresDatastore:
        """The PostgreSQL datastore of the events: its pool (the app's metrics), or a connection lent to it
        (a projection worker reads the log on its one connection)."""
        return self.recorder.datastore

    def create_table(self) -> None:
        """Creates the events' table (and schema) if missing."""
        self.recorder.create_table()

    # What the group committer adds, when it records (BROKER_LEDGER_GROUP_COMMIT=off leaves the library's).

    def committer_stalled(self) -> str | None:
        """Why the group committer does not commit now (GET /health), None when it does or there is none."""
        stalled = getattr(self.recorder, "stalled", None)
        return stalled() if stalled is not None else None

    @property
    def write_along(self) -> Callable[..., Any] | None:
        """The group committer's `write_along` (statements of other tables riding in its next transaction),
        None with the library's recorder."""
        return getattr(self.recorder, "write_along", None)

    @property
    def waits_on_loop(self) -> bool:
        """True once the group committer reads and saves for use cases on the event loop (`read_on_loop`):
        then a request runs its use case there (`LedgerStore.run`), not in a thread."""
        return getattr(self.recorder, "loop_pool", None) is not None

    def read_on_loop(self, pool: Any) -> None:
        """Has the group committer read ahead for use cases on the event loop on `pool` (an
        `AsyncConnectionPool`), the read-aheads waiting at one moment together; with the library's recorder
        nothing, and the use cases keep their threads."""
        read_on_loop = getattr(self.recorder, "read_on_loop", None)
        if read_on_loop is not None:
            read_on_loop(pool)

    def keep_write_positions(self, schema: str, table: str) -> None:
        """Has the group committer keep each partner's write position in `schema.table` with the events it
        writes; with the library's recorder nothing, and the API keeps them itself."""
        keep = getattr(self.recorder, "keep_write_positions", None)
        if keep is not None:
            keep(schema, table)
