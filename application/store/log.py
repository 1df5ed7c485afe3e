"""The ledger's event log as an application of its own: what projections subscribe to and auditors replay.

`LedgerLog` knows how the domain's events are stored (its name, hence its table `ledger_events`; its mapper,
`EventCodecMapper`, named as the default `MAPPER_TOPIC`; the transcodings of the value objects, with which
events of the first format are read) and nothing of the use cases, so it can be built from an environment
alone, as eventsourcing's projection runner does.
"""

from __future__ import annotations

from typing import Any

from eventsourcing.application import Application, ProcessingEvent
from eventsourcing.domain import BaseAggregate
from eventsourcing.persistence import JSONTranscoder, Recording
from eventsourcing.utils import get_topic

from application.store.msgspec_mapper import EventCodecMapper
from application.store.transcodings import register_value_objects

EVENTS_SCHEMA = "ledger"


class LedgerLog(Application):
    name = "Ledger"
    # events are written by msgspec and decoded into their typed fields (application/store/msgspec_mapper.py)
    env = {"MAPPER_TOPIC": get_topic(EventCodecMapper)}

    def save(self, *objs: Any, **kwargs: Any) -> list[Recording]:
        """The library's save. It collects an aggregate's events only after checking it against two
        `typing.Protocol` classes, and on Python 3.11 such an `isinstance` walks the protocol's members on
        every call (about 0.1 ms of a created buy, which saves three aggregates); an aggregate is told here by
        its class, and anything else is left to the library's own collection."""
        processing_event: ProcessingEvent = ProcessingEvent()
        for obj in objs:
            if isinstance(obj, BaseAggregate):
                processing_event.events.extend(obj.collect_events())
                processing_event.aggregates[obj.id] = obj
            else:
                processing_event.collect_events(obj)
        processing_event.saved_kwargs.update(kwargs)
        recordings = self._record(processing_event)
        self._take_snapshots(processing_event)
        self._notify(recordings)
        self.notify(processing_event.events)  # deprecated in the library, still called by its save
        return recordings

    def register_transcodings(self, transcoder: JSONTranscoder) -> None:
        super().register_transcodings(transcoder)
        register_value_objects(transcoder)
