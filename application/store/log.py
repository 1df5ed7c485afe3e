"""The ledger's event log as an application of its own: what projections subscribe to and auditors replay.

`LedgerLog` knows how the domain's events are stored (its name, hence its table `ledger_events`, and the
transcodings of the value objects) and nothing of the use cases, so it can be built from an environment
alone, as eventsourcing's projection runner does.
"""

from __future__ import annotations

from eventsourcing.application import Application
from eventsourcing.persistence import JSONTranscoder

from application.store.transcodings import register_value_objects

EVENTS_SCHEMA = "ledger"


class LedgerLog(Application):
    name = "Ledger"

    def register_transcodings(self, transcoder: JSONTranscoder) -> None:
        super().register_transcodings(transcoder)
        register_value_objects(transcoder)
