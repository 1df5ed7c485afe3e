"""Use cases of reading a transaction from the event store: as it stands, every event of its past, and its
state at a time; and several transactions at a time in one read (a page of the list `asOf`)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from eventsourcing.domain import DomainEvent

from application.store.aggregates import LedgerStore, rebuilt
from domain.errors import TransactionNotFound
from domain.transaction import Transaction


def happened_at(event: DomainEvent) -> datetime:
    """When a change happened by the ledger's clock (its `at`): the one time base of the history's event
    timestamps, `created` and `updated`, and the `asOf` filter. The store's own recording time (the event's
    `timestamp`, a moment later) is not shown to clients."""
    return getattr(event, "at", event.timestamp)


@dataclass(frozen=True)
class Step:
    """One event of a transaction's history and the status it left the transaction in (`before` None for
    the event that created it)."""

    event: DomainEvent
    before: str | None
    after: str


def steps_of(events: list[DomainEvent]) -> list[Step]:
    """The events of one transaction, oldest first, each with the status before and after it."""
    steps, transaction = [], None
    for event in events:
        before = transaction.status.value if transaction is not None else None
        transaction = event.mutate(transaction)
        steps.append(Step(event, before, transaction.status.value))
    return steps


class History:
    def __init__(self, store: LedgerStore) -> None:
        self.store = store

    def transaction(self, partner: str, code: str) -> Transaction:
        """The partner's transaction `code` as it stands (`TransactionNotFound` for an unknown code, and for
        another partner's)."""
        return self.store.transaction(partner, code)

    def history(self, partner: str, code: str, at: datetime | None = None) -> list[DomainEvent]:
        """The events of the partner's transaction `code`, oldest first: all, or those up to `at`."""
        events = self.store.events_of(Transaction.create_id(partner, code))
        if not events:
            raise TransactionNotFound(f"no transaction with code {code!r}")
        if at is not None:
            events = [event for event in events if happened_at(event) <= at]
            if not events:
                raise TransactionNotFound(f"transaction {code!r} did not exist yet at {at.isoformat()}")
        return events

    def as_of(self, partner: str, code: str, at: datetime) -> Transaction:
        """The transaction as it stood at `at`: after its last event at or before that time."""
        return self.transaction_history(partner, code, at)[0]

    def transaction_history(
        self, partner: str, code: str, at: datetime | None = None
    ) -> tuple[Transaction, list[DomainEvent]]:
        """The transaction after its last event up to `at` (or its last event), and those events."""
        events = self.history(partner, code, at)
        version = events[-1].originator_version
        return self.store.aggregate_at(Transaction.create_id(partner, code), version), events

    def transactions_at(self, partner: str, codes: list[str], at: datetime) -> list[Transaction]:
        """The partner's transactions `codes`, each as it stood at `at` (after its last event up to then),
        in the order of `codes`, their events read in one query; one without an event by then is left out."""
        ids = [Transaction.create_id(partner, code) for code in codes]
        histories = self.store.histories_of(ids)
        found = []
        for transaction_id in ids:
            events = [event for event in histories.get(transaction_id, []) if happened_at(event) <= at]
            if events:
                found.append(rebuilt(events))
        return found
