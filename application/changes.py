"""One change of a recorded transaction: load it, apply one command at the clock's time, save it (with its
limit reservation given back when the change cancels it), attempted again on a version conflict."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from application.context import Context
from application.limits import Limits
from application.store.request_writes import RequestWrites
from domain.transaction import Status, Transaction


class TransactionChanges:
    def __init__(self, context: Context, limits: Limits) -> None:
        self.context = context
        self.store = context.store
        self.limits = limits

    def apply(
        self,
        partner: str,
        code: str,
        command: Callable[[Transaction, datetime], None],
        release_limits: bool = False,
        *,
        unit: RequestWrites | None = None,
    ) -> Transaction:
        """Applies `command` and saves within the request's `unit` of work (None without a request, as for
        the sweeper); the limit windows are given back with `release_limits`, or when the command cancels
        the transaction (as a late payment cancels an expired sell)."""
        for attempt in self.store.attempts():
            with attempt:
                transaction = self.store.transaction(partner, code)
                was_cancelled = transaction.status == Status.CANCELLED
                command(transaction, self.context.clock.now())
                cancelled_now = transaction.status == Status.CANCELLED and not was_cancelled
                windows = self.limits.release(transaction) if release_limits or cancelled_now else []
                self.store.save(transaction, *windows, unit=unit)
                return transaction
