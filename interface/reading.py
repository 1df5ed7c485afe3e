"""The reading use cases of the API: transactions from the read models, read after the caller's writes.

A read first waits until the read models have processed the event log as far as it went when the read
began, so a client that has just written reads what it wrote, whichever worker served the write. The wait
is bounded: when the projections lag further (or do not run), the read answers from what is there.
"""

from __future__ import annotations

import logging
from typing import Any

from application.ledger import Ledger
from domain.errors import TransactionNotFound
from projections.queries import TransactionFilter, find_transaction, transaction_page
from projections.read_models import ReadModels

log = logging.getLogger("broker_ledger.reading")
DEFAULT_WAIT_SECONDS = 2.0


class Reader:
    def __init__(self, ledger: Ledger, view: ReadModels, wait_seconds: float = DEFAULT_WAIT_SECONDS) -> None:
        self.ledger = ledger
        self.view = view
        self.wait_seconds = wait_seconds

    def catch_up(self) -> bool:
        """Waits until the read models hold every event recorded so far; False when time ran out."""
        head = self.ledger.recorder.max_notification_id() or 0
        caught_up = self.view.caught_up(head, self.wait_seconds)
        if not caught_up:
            log.warning("read models behind the event log (%d); answering from what is there", head)
        return caught_up

    def transaction(self, partner: str, code: str) -> dict[str, Any]:
        self.catch_up()
        row = find_transaction(self.view, partner, code)
        if row is None:
            raise TransactionNotFound(f"no transaction with code {code!r}")
        return row

    def transactions(
        self, partner: str, where: TransactionFilter, page: int, page_size: int
    ) -> tuple[int, list[dict[str, Any]]]:
        self.catch_up()
        return transaction_page(self.view, partner, where, page, page_size)

    def close(self) -> None:
        self.view.datastore.close()
