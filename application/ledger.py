"""`Ledger`: the ledger's event-sourced application, on which every use case runs.

It is eventsourcing's `Application` for the ledger's events (`LedgerLog`: its store and transcodings), with
what only it can give the use cases: its `LedgerStore` (load, read ahead, find, attempts, save), the
ledger's settings and clock, and the snapshotting of the aggregates whose history only grows. It runs no use
case: the use cases are plain modules by feature, composed once on a ledger by `application.use_cases`
(`UseCases.of`), and the interface calls them directly.
"""

from __future__ import annotations

from application.ports import Clock, SystemClock
from application.settings import Settings
from application.store.aggregates import LedgerStore
from application.store.log import LedgerLog
from domain.deposits import AddressPool


class Ledger(LedgerLog):
    # Aggregates whose history only grows are loaded from a snapshot plus the events since: every sell and
    # account opening allocates from its crypto's pool. (Limit windows need none: each loads from its latest
    # event, which carries its total; see domain/limits.py.)
    snapshotting_intervals = {AddressPool: 100}

    def __init__(
        self, settings: Settings, clock: Clock | None = None, env: dict[str, str] | None = None
    ) -> None:
        super().__init__(env)
        self.settings = settings
        self.clock = clock or SystemClock()
        self.store = LedgerStore(self)
