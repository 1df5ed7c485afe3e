"""The reading use cases of the API: transactions from the read models, read after the caller's writes.

A read first waits until the read models have processed the partner's last write (its position, kept by
`interface/read_your_writes.py`), so a client that has just written reads what it wrote, whichever worker
or replica served the write; it does not wait for other partners' writes. The wait is bounded: when the
projections lag further (or do not run), the read answers from what is there. A transaction the read
models do not show (yet) is looked up in the event store before it is called not found: a projection that
lags or stalled never makes a recorded transaction look absent.
"""

from __future__ import annotations

import logging
from typing import Any

from application.ledger import Ledger
from interface import presenters
from interface.read_your_writes import WritePositions
from interface.schemas import responses as r
from projections.queries import TransactionFilter, find_transaction, transaction_page
from projections.read_models import ReadModels

log = logging.getLogger("broker_ledger.reading")
DEFAULT_WAIT_SECONDS = 2.0


class Reader:
    def __init__(
        self,
        ledger: Ledger,
        view: ReadModels,
        positions: WritePositions,
        wait_seconds: float = DEFAULT_WAIT_SECONDS,
    ) -> None:
        self.ledger = ledger
        self.view = view
        self.positions = positions
        self.wait_seconds = wait_seconds

    def catch_up(self, partner: str) -> bool:
        """Waits until the read models hold the partner's last write; False when time ran out."""
        with self.view.datastore.get_connection() as conn:
            written = self.positions.last(conn, partner)
        caught_up = written == 0 or self.view.caught_up(written, self.wait_seconds)
        if not caught_up:
            log.warning(
                "read models behind %s's last write (%d); answering from what is there", partner, written
            )
        return caught_up

    def transaction(self, partner: str, code: str) -> r.TransactionEnvelope:
        """The transaction as the read models show it; if they do not, as its aggregate in the event store
        is (TransactionNotFound when it has none)."""
        self.catch_up(partner)
        row = find_transaction(self.view, partner, code)
        if row is None:
            log.info(
                "transaction %s of %s is not in the read models; reading it from the events", code, partner
            )
            return presenters.transaction(self.ledger.settings, self.ledger.transaction(partner, code))
        return r.TransactionEnvelope(transaction=presenters.transaction_row(self.ledger.settings, row))

    def transactions(
        self, partner: str, where: TransactionFilter, page: int, page_size: int
    ) -> tuple[int, list[dict[str, Any]]]:
        self.catch_up(partner)
        return transaction_page(self.view, partner, where, page, page_size)

    def close(self) -> None:
        self.view.datastore.close()
