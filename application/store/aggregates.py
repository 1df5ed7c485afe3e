"""`LedgerStore`: how every use case loads and saves aggregates.

It wraps the ledger application's repository and recorder with what the use cases need beyond them:
- `loading(*ids)`: reads several aggregates' histories in one query (each from its latest snapshot on), so a
  use case that needs a transaction, its customer, account and limit windows pays one round trip; `find`
  inside the block rebuilds them from what was read. An id named as `LatestOf(id)` has only its latest event
  read, for `latest_event` (a limit window is built from it alone).
- `find(id)`: one aggregate (from the read-ahead, or read now), None when it has no events.
- `latest_event(id)`: an aggregate's latest event (from the read-ahead, or read now), None when it has none.
- by business key: `customer`, `account`, `transaction`, refusing with the domain's not-found errors.
- `retrying(use_case)`: runs a use case again when its save lost a race on an aggregate version; safe,
  because a use case records nothing until its one save.
- `save(*aggregates)`: eventsourcing's save, noting the notification id reached for read-your-writes.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, NamedTuple, TypeVar
from uuid import UUID

from eventsourcing.application import AggregateNotFoundError, Application
from eventsourcing.persistence import RecordConflictError

from application.store.positions import note_recorded
from domain.account import Account
from domain.customer import Customer
from domain.deposits import AddressPool
from domain.errors import AccountNotFound, CustomerNotFound, DomainError, Refusal, TransactionNotFound
from domain.transaction import Transaction

T = TypeVar("T")
A = TypeVar("A")
MAX_ATTEMPTS = 200


class LatestOf(NamedTuple):
    """Names to `LedgerStore.loading` an aggregate of which only the latest event is to be read ahead."""

    aggregate_id: UUID


@dataclass(frozen=True)
class ReadAhead:
    """What `LedgerStore.loading` read: histories (from the latest snapshot on), and latest events (None for
    an aggregate that has none), by aggregate id."""

    histories: dict[UUID, list[Any]]
    latest: dict[UUID, Any]


# Events read ahead by `LedgerStore.loading` for the use case running in this context.
_loaded: ContextVar[ReadAhead | None] = ContextVar("ledger_loaded", default=None)


class ConcurrencyExhausted(DomainError):
    """A use case lost every race with concurrent requests: nothing was recorded, and the same request may
    pass a moment later, so it is answered as a service that cannot serve now (503, Retry-After; an
    Idempotency-Key keeps no such answer)."""

    code = "concurrent_update"
    kind = Refusal.UNAVAILABLE
    title = "Too many concurrent updates"


class LedgerStore:
    """Load, read ahead, find, retry and save, on the ledger application's event store."""

    conflicts = RecordConflictError

    def __init__(self, app: Application) -> None:
        self.app = app

    def save(self, *aggregates: Any) -> Any:
        recordings = self.app.save(*aggregates)
        note_recorded(recordings)
        return recordings

    def retrying(self, use_case: Callable[[], T]) -> T:
        """Runs `use_case` again when its save lost a race on an aggregate version."""
        for attempt in range(MAX_ATTEMPTS):
            try:
                return use_case()
            except RecordConflictError:
                time.sleep(random.uniform(0, min(0.05, 0.0005 * 2 ** min(attempt, 10))))
        raise ConcurrencyExhausted(
            f"the request lost {MAX_ATTEMPTS} races with concurrent requests; try again"
        )

    @contextmanager
    def loading(self, *reads: UUID | LatestOf) -> Iterator[None]:
        """Reads the events of these aggregates in one query (of those named as `LatestOf`, the latest
        only); `find` and `latest_event` in the block use what was read. Only for a block that saves at its
        end: what it finds is as of the start of the block."""
        read_ahead = self._read_ahead(reads)
        if read_ahead is None:
            yield
            return
        token = _loaded.set(read_ahead)
        try:
            yield
        finally:
            _loaded.reset(token)

    def find(self, aggregate_id: UUID) -> Any | None:
        """The aggregate rebuilt from its latest snapshot and the events since (as `loading` read them
        ahead, or read now), None if it has none."""
        loaded = _loaded.get()
        events = loaded.histories.get(aggregate_id) if loaded is not None else None
        if events is None:
            histories = self._histories([aggregate_id])
            if histories is None:
                try:
                    return self.app.repository.get(aggregate_id)
                except AggregateNotFoundError:
                    return None
            events = histories[aggregate_id]
        aggregate = None
        for domain_event in events:
            aggregate = domain_event.mutate(aggregate)
        return aggregate

    def latest_event(self, aggregate_id: UUID) -> Any | None:
        """The aggregate's latest event (as `loading` read it ahead, or read now), None if it has none."""
        loaded = _loaded.get()
        if loaded is not None and aggregate_id in loaded.latest:
            return loaded.latest[aggregate_id]
        stored = self.app.recorder.select_events(aggregate_id, desc=True, limit=1)
        return self.app.mapper.to_domain_event(stored[0]) if stored else None

    def get_or_create(self, aggregate_id: UUID, create: Callable[[], A]) -> A:
        found = self.find(aggregate_id)
        return found if found is not None else create()

    def _histories(self, aggregate_ids: Sequence[UUID]) -> dict[UUID, list[Any]] | None:
        """The domain events of these aggregates, each from its latest snapshot on, in one query; None with
        the library's recorder (BROKER_LEDGER_GROUP_COMMIT=off), which has no such query."""
        read_ahead = self._read_ahead(aggregate_ids)
        return read_ahead.histories if read_ahead is not None else None

    def _read_ahead(self, reads: Sequence[UUID | LatestOf]) -> ReadAhead | None:
        """The histories and latest events `reads` name, in one query; None with the library's recorder."""
        recorder = self.app.recorder
        if not hasattr(recorder, "select_events_of"):
            return None
        ids = [read for read in reads if not isinstance(read, LatestOf)]
        latest_ids = [
            read.aggregate_id for read in reads if isinstance(read, LatestOf) and read.aggregate_id not in ids
        ]
        snapshots = self.app.snapshots
        table = snapshots.recorder.events_table_name if snapshots is not None else None
        if latest_ids and table is not None:
            stored_events = recorder.select_histories_and_latest_of(ids, latest_ids, table)
        else:
            stored_events = recorder.select_events_of([*ids, *latest_ids], table)
        read_ahead = ReadAhead({aggregate_id: [] for aggregate_id in ids}, dict.fromkeys(latest_ids))
        for stored in stored_events:
            domain_event = self.app.mapper.to_domain_event(stored)
            if stored.originator_id in read_ahead.latest:
                read_ahead.latest[stored.originator_id] = domain_event
            else:
                read_ahead.histories[stored.originator_id].append(domain_event)
        return read_ahead

    # --- aggregates by business key ----------------------------------------------------------------------

    def customer(self, partner: str, code: str) -> Customer:
        return self._named(
            Customer.create_id(partner, code), CustomerNotFound(f"no customer with customerCode {code!r}")
        )

    def account(self, partner: str, code: str) -> Account:
        return self._named(
            Account.create_id(partner, code), AccountNotFound(f"no account with accountCode {code!r}")
        )

    def transaction(self, partner: str, code: str) -> Transaction:
        return self._named(
            Transaction.create_id(partner, code), TransactionNotFound(f"no transaction with code {code!r}")
        )

    def _named(self, aggregate_id: UUID, not_found: DomainError) -> Any:
        aggregate = self.find(aggregate_id)
        if aggregate is None:
            raise not_found
        return aggregate

    def address_pool(self, crypto: str) -> AddressPool:
        """The crypto-currency's deposit address pool (from its latest snapshot and the events since)."""
        pool = self.find(AddressPool.create_id(crypto))
        return pool if pool is not None else AddressPool(crypto)
