"""The reading use cases of the API: transactions from the read models, read after the caller's writes.

A read first waits until the read models have processed the partner's last write (its position, kept by
`interface/http/read_your_writes.py`), so a client that has just written reads what it wrote, whichever worker
or replica served the write; it does not wait for other partners' writes. The wait is bounded (2 s), and
skipped when the read models' projection has a recorded failure (`projections.status`): it will not catch up
meanwhile. A read model still behind the partner's write is never served as if it were complete: one
transaction is then read from its aggregate in the event store, and a list is refused with 503
`read_model_behind` and `Retry-After` (it would miss what the partner wrote). A transaction the read models
do not show is also looked up in the event store before it is called not found. A list `asOf` an instant
waits the same way, then takes the transactions that existed then, with their status then, from the status
history (`transaction_page_at`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import date, datetime
from typing import Any

from application.ledger import Ledger
from interface.http.read_your_writes import WritePositions, holds_write, read_model_behind
from interface.transactions import presenters
from interface.transactions import shapes as r
from projections import status
from projections.catalog import READ_MODELS
from projections.queries import (
    DailyVolume,
    TransactionFilter,
    daily_volumes,
    find_transaction,
    transaction_page,
    transaction_page_at,
)
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
        failing: Callable[[], bool] | None = None,
    ) -> None:
        self.ledger = ledger
        self.view = view
        self.positions = positions
        self.wait_seconds = wait_seconds
        self.failing = failing or self._read_models_failing

    def catch_up(self, partner: str) -> bool:
        """Waits until the read models hold the partner's last write (see `holds_write`)."""
        with self.view.datastore.get_connection() as conn:
            written = self.positions.last(conn, partner)
        caught_up = holds_write(written, self.view.caught_up, self.failing, self.wait_seconds)
        if not caught_up:
            log.warning("read models behind %s's last write (%d)", partner, written)
        return caught_up

    def transaction(self, partner: str, code: str) -> r.TransactionEnvelope:
        """The transaction as the read models show it, when they hold the partner's last write; else, or if
        they do not show it, as its aggregate in the event store is (TransactionNotFound when it has none)."""
        row = find_transaction(self.view, partner, code) if self.catch_up(partner) else None
        if row is None:
            log.info("transaction %s of %s read from the events, not the read models", code, partner)
            return presenters.transaction(self.ledger.settings, self.ledger.store.transaction(partner, code))
        return r.TransactionEnvelope(transaction=presenters.transaction_row(self.ledger.settings, row))

    def transactions(
        self, partner: str, where: TransactionFilter, page: int, page_size: int
    ) -> tuple[int, list[dict[str, Any]]]:
        """A page of the partner's transactions; ReadModelBehind (503) while the read models do not hold the
        partner's last write."""
        self.hold(partner)
        return transaction_page(self.view, partner, where, page, page_size)

    def transactions_at(
        self, partner: str, where: TransactionFilter, at: datetime, page: int, page_size: int
    ) -> tuple[int, list[dict[str, Any]]]:
        """A page of the partner's transactions as the list stood at `at`: their codes and statuses then;
        ReadModelBehind (503) while the read models do not hold the partner's last write."""
        self.hold(partner)
        return transaction_page_at(self.view, partner, where, at, page, page_size)

    def daily_volumes(self, partner: str, first: date, last: date) -> list[DailyVolume]:
        """The partner's volumes of each day from `first` to `last` (`read.daily_volumes`); ReadModelBehind
        (503) while the read models do not hold the partner's last write."""
        self.hold(partner)
        return daily_volumes(self.view, partner, first, last)

    def hold(self, partner: str) -> None:
        """Returns once the read models hold the partner's last write; ReadModelBehind (503) if they do not
        within the wait: an answer without that write is not given as if it were complete."""
        if not self.catch_up(partner):
            raise read_model_behind(self.failing())

    def _read_models_failing(self) -> bool:
        with self.view.datastore.get_connection() as conn:
            return status.has_failure(conn, READ_MODELS.name)

    def close(self) -> None:
        self.view.datastore.close()
