"""The expiry sweeper: lapses overdue transactions (staged buys and unpaid sells past validUntil).

`OverdueTransactions` is its memory: it reads the ledger's own event log for the transaction events recorded
since its last look and keeps the deadlines of the open ones, so a sweep costs what was recorded since the
last one. Any event after a transaction's opening moves it out of Staged or Initiated for good, so it drops
the deadline: a buy committed at once is never decoded here nor visited at its validUntil.
Each overdue one is lapsed by the settlement's `expire` (`application.settlement`). `ExpirySweeper` runs a
sweep in a background thread every interval.
"""

from __future__ import annotations

import logging
import random
import threading
from datetime import datetime
from typing import TYPE_CHECKING
from uuid import UUID

from eventsourcing.utils import get_topic

from domain.errors import InvalidStateTransition
from domain.transaction import Transaction, quote_is_valid

if TYPE_CHECKING:
    from application.ledger import Ledger
    from application.settlement import Settlement
    from application.store.log import Notification

log = logging.getLogger("broker_ledger.sweeper")
# The events a transaction opens with (only they leave it expirable), and every event it records.
OPENING_TOPICS = frozenset(get_topic(event) for event in (Transaction.Staged, Transaction.Initiated))
TRANSACTION_TOPICS = sorted(
    get_topic(member)
    for member in vars(Transaction).values()
    if isinstance(member, type) and issubclass(member, Transaction.Event)
)


class OverdueTransactions:
    def __init__(self, ledger: Ledger, settlement: Settlement) -> None:
        self.ledger = ledger  # its event log and clock
        self.settlement = settlement  # which lapses one transaction
        self._sweeping = threading.Lock()  # one sweep at a time
        self._deadlines: dict[UUID, tuple[str, str, datetime]] = {}  # by transaction id
        self._scanned = 0  # the last notification id read

    def expire_overdue(self, batch: int = 500) -> list[str]:
        """Cancels every staged buy and unpaid sell past its validUntil; returns their codes."""
        with self._sweeping:
            self._scan_transaction_events(batch)
            now = self.ledger.clock.now()
            expired = []
            for key, (partner, code, valid_until) in list(self._deadlines.items()):
                if quote_is_valid(valid_until, now):
                    continue
                try:
                    self.settlement.expire(partner, code)
                    expired.append(code)
                except InvalidStateTransition:
                    pass  # committed, paid or already cancelled meanwhile
                del self._deadlines[key]
            return expired

    def _scan_transaction_events(self, batch: int) -> None:
        while True:
            notifications = self.ledger.notifications(self._scanned + 1, batch, topics=TRANSACTION_TOPICS)
            followed = {n.originator_id for n in notifications if n.topic not in OPENING_TOPICS}
            for notification in notifications:
                if notification.topic not in OPENING_TOPICS:
                    self._deadlines.pop(notification.originator_id, None)
                elif notification.originator_id not in followed:
                    self._note_deadline(notification)
                self._scanned = notification.id
            if len(notifications) < batch:
                return

    def _note_deadline(self, notification: Notification) -> None:
        opened = self.ledger.decoder(notification)
        self._deadlines[notification.originator_id] = (
            opened.order.partner,
            opened.order.code,
            opened.valid_until,
        )


class ExpirySweeper:
    def __init__(self, ledger: Ledger, settlement: Settlement, interval_seconds: float = 15.0) -> None:
        self.overdue = OverdueTransactions(ledger, settlement)
        self.interval = interval_seconds
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name="expiry-sweeper", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopped.set()
        self._thread.join(timeout=5)

    def sweep_once(self, batch: int = 500) -> list[str]:
        expired = self.overdue.expire_overdue(batch)
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
