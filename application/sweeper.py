"""A background thread that lapses overdue transactions: staged buys and unpaid sells past validUntil."""

from __future__ import annotations

import logging
import random
import threading

from application.ledger import Ledger

log = logging.getLogger("broker_ledger.sweeper")


class ExpirySweeper:
    def __init__(self, ledger: Ledger, interval_seconds: float = 15.0) -> None:
        self.ledger = ledger
        self.interval = interval_seconds
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name="expiry-sweeper", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopped.set()
        self._thread.join(timeout=5)

    def sweep_once(self) -> list[str]:
        expired = self.ledger.expire_overdue()
        if expired:
            log.info("cancelled %d overdue transactions: %s", len(expired), ", ".join(expired[:20]))
        return expired

    def _run(self) -> None:
        # Several workers sweep independently; jitter keeps them apart, and a transaction another worker
        # cancelled first is simply skipped.
        while not self._stopped.wait(self.interval * random.uniform(0.8, 1.2)):
            try:
                self.sweep_once()
            except Exception:  # the database may be down for a while: try again next round
                log.exception("expiry sweep failed; retrying in %.0f s", self.interval)
