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

With read servers (BROKER_LEDGER_READ_DATABASE_URL), the reads go to their view of the read models first:
the partner's last write is read on the primary's, the standby's view waits for it, and if it does not
reach it within the wait (or cannot be reached) the primary's view serves the read, within what is left of
the same bound (`interface/http/read_your_writes.py`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import date, datetime
from typing import Any

from application.ledger import Ledger
from interface.http.read_your_writes import (
    PinnedConnections,
    WritePositions,
    holds_write_by,
    read_model_behind,
    served_by_the_primary,
)
from interface.shared import transaction_presenters as presenters
from interface.shared import transaction_shapes as r
from projections import status
from projections.catalog import READ_MODELS
from projections.queries import (
    DailyVolume,
    TransactionFilter,
    daily_volumes,
    find_transaction,
    late_payment_candidates_at,
    transaction_page,
    transaction_page_at,
)
from projections.read_models import ReadModels

log = logging.getLogger("broker_ledger.reading")
DEFAULT_WAIT_SECONDS = 2.0


class Reader:
    """The read models' reads: on `view`, the read servers' when BROKER_LEDGER_READ_DATABASE_URL is set
    (then `primary` is the primary's view: the partner's last write is read there, and it serves the reads
    the read servers cannot give in time), else the primary's (`primary` None)."""

    def __init__(
        self,
        ledger: Ledger,
        view: ReadModels,
        positions: WritePositions,
        wait_seconds: float = DEFAULT_WAIT_SECONDS,
        failing: Callable[[], bool] | None = None,
        primary: ReadModels | None = None,
    ) -> None:
        self.ledger = ledger
        self.view = view
        self.primary = primary
        self.positions = positions
        self.wait_seconds = wait_seconds
        self.failing = failing or self._read_models_failing
        # one connection of the read servers' view per read (`PinnedConnections`)
        self.standby_connections = None if primary is None else PinnedConnections.installed_in(view.datastore)

    @property
    def primary_view(self) -> ReadModels:
        """The primary's view of the read models (the one the projection writes)."""
        return self.primary or self.view

    def catch_up(self, partner: str) -> bool:
        """Waits until the read models hold the partner's last write (see `holds_write`)."""
        with self.holding(partner) as view:
            return view is not None

    @contextmanager
    def holding(self, partner: str) -> Iterator[ReadModels | None]:
        """The view that holds the partner's last write, for the block's reads: the read servers' once it
        reaches it within the wait (waiting and reading on one of their connections), else the primary's
        within what is left of the wait; None when neither does."""
        deadline = time.monotonic() + self.wait_seconds
        with self.primary_view.datastore.get_connection() as conn:
            written = self.positions.last(conn, partner)
        if self.standby_connections is not None:
            with self.standby_connections.pinned() as pinned:
                if pinned and holds_write_by(written, self.view.caught_up, self.failing, deadline, True):
                    yield self.view
                    return
            served_by_the_primary("read models", partner, written)
        if holds_write_by(written, self.primary_view.caught_up, self.failing, deadline, False):
            yield self.primary_view
            return
        log.warning("read models behind %s's last write (%d)", partner, written)
        yield None

    def transaction(self, partner: str, code: str) -> r.TransactionEnvelope:
        """The transaction as the read models show it, when they hold the partner's last write; else, or if
        they do not show it, as its aggregate in the event store is (TransactionNotFound when it has none)."""
        with self.holding(partner) as view:
            row = find_transaction(view, partner, code) if view is not None else None
        if row is None:
            log.info("transaction %s of %s read from the events, not the read models", code, partner)
            return presenters.transaction(self.ledger.settings, self.ledger.store.transaction(partner, code))
        return r.TransactionEnvelope(transaction=presenters.transaction_row(self.ledger.settings, row))

    def transactions(
        self, partner: str, where: TransactionFilter, page: int, page_size: int
    ) -> tuple[int, list[dict[str, Any]]]:
        """A page of the partner's transactions; ReadModelBehind (503) while the read models do not hold the
        partner's last write."""
        with self.held(partner) as view:
            return transaction_page(view, partner, where, page, page_size)

    def transactions_at(
        self,
        partner: str,
        where: TransactionFilter,
        at: datetime,
        page: int,
        page_size: int,
        paid_late_then: list[str] | None = None,
    ) -> tuple[int, list[dict[str, Any]]]:
        """A page of the partner's transactions as the list stood at `at`: their codes and statuses then
        (`paid_late_then`: the codes of the late payments still to resolve then, for `where.paid_late`);
        ReadModelBehind (503) while the read models do not hold the partner's last write."""
        with self.held(partner) as view:
            return transaction_page_at(view, partner, where, at, page, page_size, paid_late_then)

    def late_payment_candidates_at(self, partner: str, where: TransactionFilter, at: datetime) -> list[str]:
        """The partner's sells CANCELLED at `at` that have a payment recorded now (see
        `late_payment_candidates_at`); ReadModelBehind (503) while the read models lack its last write."""
        with self.held(partner) as view:
            return late_payment_candidates_at(view, partner, where, at)

    def daily_volumes(self, partner: str, first: date, last: date) -> list[DailyVolume]:
        """The partner's volumes of each day from `first` to `last` (`read.daily_volumes`); ReadModelBehind
        (503) while the read models do not hold the partner's last write."""
        with self.held(partner) as view:
            return daily_volumes(view, partner, first, last)

    @contextmanager
    def held(self, partner: str) -> Iterator[ReadModels]:
        """The view to read, for the block, once it holds the partner's last write; ReadModelBehind (503) if
        none does within the wait: an answer without that write is not given as if it were complete."""
        with self.holding(partner) as view:
            if view is None:
                raise read_model_behind(self.failing())
            yield view

    def _read_models_failing(self) -> bool:
        """Whether the read models' projection has a recorded failure, as the primary has it (where the
        projection records it)."""
        with self.primary_view.datastore.get_connection() as conn:
            return status.has_failure(conn, READ_MODELS.name)

    def close(self) -> None:
        self.view.datastore.close()
        if self.primary is not None:
            self.primary.datastore.close()
