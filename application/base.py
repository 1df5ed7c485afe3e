"""The ledger application: one method per use case. Each loads aggregates, calls one command on each, and
saves them together in one atomic recording; a version conflict (another request changed one of them
first) reruns the whole use case, which is safe because nothing was recorded."""

from __future__ import annotations

import random
import secrets
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import datetime
from typing import Any, TypeVar
from uuid import UUID

from eventsourcing.application import AggregateNotFoundError
from eventsourcing.persistence import RecordConflictError

from application.log import LedgerLog
from application.ports import AddressBook, Clock, PriceSource, SystemClock
from application.positions import note_recorded
from application.settings import Settings
from domain.account import Account
from domain.customer import Customer
from domain.deposits import AddressPool
from domain.errors import AccountNotFound, CustomerNotFound, DomainError, TransactionNotFound
from domain.limits import LimitWindow
from domain.transaction import Transaction

T = TypeVar("T")
A = TypeVar("A")
MAX_ATTEMPTS = 200
# Events read ahead by `LedgerBase.loading`, by aggregate id, for the use case running in this context.
_loaded: ContextVar[dict[UUID, list[Any]] | None] = ContextVar("ledger_loaded", default=None)


class ConcurrencyExhausted(DomainError):
    code = "concurrent_update"
    title = "Too many concurrent updates"


class LedgerBase(LedgerLog):
    """Plumbing shared by the use cases: transcodings, loading by business key, retries."""

    conflicts = RecordConflictError
    # Aggregates whose history only grows are loaded from a snapshot plus the events since: every sell and
    # account opening allocates from its crypto's pool, and every buy or sell reserves in its customer's
    # day and month limit windows (a month window of an active customer holds hundreds of reservations).
    snapshotting_intervals = {AddressPool: 100, LimitWindow: 16}

    def __init__(
        self,
        settings: Settings,
        prices: PriceSource,
        addresses: AddressBook,
        clock: Clock | None = None,
        env: dict[str, str] | None = None,
    ) -> None:
        self.settings = settings
        self.prices = prices
        self.addresses = addresses
        self.clock = clock or SystemClock()
        self._sweeping = threading.Lock()  # one expiry sweep at a time (see Settlement.expire_overdue)
        self._deadlines: dict[UUID, tuple[str, str, datetime]] = {}  # by transaction id (see Settlement)
        self._scanned = 0
        super().__init__(env)

    def save(self, *objs: Any, **kwargs: Any) -> Any:
        """eventsourcing's save, noting how far the log went for the request that saved (read-your-writes)."""
        recordings = super().save(*objs, **kwargs)
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
    def loading(self, *aggregate_ids: UUID) -> Iterator[None]:
        """Reads the events of these aggregates in one query; `find` in the block rebuilds them from it.

        A use case that needs several aggregates pays one round trip instead of one each. Only for a block
        that saves at its end: what it finds is as of the start of the block."""
        histories = self._histories(aggregate_ids)
        if histories is None:
            yield
            return
        token = _loaded.set(histories)
        try:
            yield
        finally:
            _loaded.reset(token)

    def find(self, aggregate_id: UUID) -> Any | None:
        """The aggregate rebuilt from its latest snapshot and the events since (as `loading` read them
        ahead, or read now), None if it has none."""
        loaded = _loaded.get()
        events = loaded.get(aggregate_id) if loaded is not None else None
        if events is None:
            histories = self._histories([aggregate_id])
            if histories is None:
                try:
                    return self.repository.get(aggregate_id)
                except AggregateNotFoundError:
                    return None
            events = histories[aggregate_id]
        aggregate = None
        for domain_event in events:
            aggregate = domain_event.mutate(aggregate)
        return aggregate

    def _histories(self, aggregate_ids: Sequence[UUID]) -> dict[UUID, list[Any]] | None:
        """The domain events of these aggregates, each from its latest snapshot on, in one query; None with
        the library's recorder (BROKER_LEDGER_GROUP_COMMIT=off), which has no such query."""
        select_events_of = getattr(self.recorder, "select_events_of", None)
        if select_events_of is None:
            return None
        snapshots = self.snapshots.recorder.events_table_name if self.snapshots is not None else None
        histories: dict[UUID, list[Any]] = {aggregate_id: [] for aggregate_id in aggregate_ids}
        for stored in select_events_of(aggregate_ids, snapshots):
            histories[stored.originator_id].append(self.mapper.to_domain_event(stored))
        return histories

    def address_pool(self, crypto: str) -> AddressPool:
        """The crypto-currency's deposit address pool (from its latest snapshot and the events since)."""
        pool = self.find(AddressPool.create_id(crypto))
        return pool if pool is not None else AddressPool(crypto)

    def get_or_create(self, aggregate_id: UUID, create: Callable[[], A]) -> A:
        found = self.find(aggregate_id)
        return found if found is not None else create()

    def customer(self, partner: str, code: str) -> Customer:
        customer = self.find(Customer.create_id(partner, code))
        if customer is None:
            raise CustomerNotFound(f"no customer with customerCode {code!r}")
        return customer

    def account(self, partner: str, code: str) -> Account:
        account = self.find(Account.create_id(partner, code))
        if account is None:
            raise AccountNotFound(f"no account with accountCode {code!r}")
        return account

    def transaction(self, partner: str, code: str) -> Transaction:
        transaction = self.find(Transaction.create_id(partner, code))
        if transaction is None:
            raise TransactionNotFound(f"no transaction with code {code!r}")
        return transaction

    @staticmethod
    def new_transaction_code() -> str:
        return "TX" + secrets.token_hex(8).upper()
