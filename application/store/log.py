"""The ledger's event log as an application of its own: what projections subscribe to and auditors replay.

`LedgerLog` knows how the domain's events are stored (its name, hence its table `ledger_events`; its mapper,
`EventCodecMapper`, named as the default `MAPPER_TOPIC`; the transcodings of the value objects, with which
events of the first format are read) and nothing of the use cases, so it can be built from an environment
alone, as eventsourcing's projection runner does.
"""

from __future__ import annotations

from eventsourcing.application import Application
from eventsourcing.persistence import JSONTranscoder
from eventsourcing.utils import get_topic

from application.store.msgspec_mapper import EventCodecMapper
from application.store.transcodings import register_value_objects

EVENTS_SCHEMA = "ledger"


class LedgerLog(Application):
    name = "Ledger"
    # events are written by msgspec and decoded into their typed fields (application/store/msgspec_mapper.py)
    env = {"MAPPER_TOPIC": get_topic(EventCodecMapper)}

    def register_transcodings(self, transcoder: JSONTranscoder) -> None:
        super().register_transcodings(transcoder)
        register_value_objects(transcoder)
