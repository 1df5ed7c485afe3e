"""One change of a recorded transaction: load it, apply one command at the clock's time, save it (with its
limit reservation given back when the change cancels it), rerun on a version conflict."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from application.context import Context
from application.limits import Limits
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
    ) -> Transaction:
        """Applies `command`; the limit windows are given back with `release_limits`, or when the command
        cancels the transaction (as a late payment cancels an expired sell)."""

        def change() -> Transaction:
            transaction = self.store.transaction(partner, code)
            was_cancelled = transaction.status == Status.CANCELLED
            command(transaction, self.context.clock.now())
            cancelled_now = transaction.status == Status.CANCELLED and not was_cancelled
            windows = self.limits.release(transaction) if release_limits or cancelled_now else []
            self.store.save(transaction, *windows)
            return transaction

        return self.store.retrying(change)
