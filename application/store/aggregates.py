"""`LedgerStore`: how every use case loads and saves aggregates.

It wraps the ledger application's repository and recorder with what the use cases need beyond them:
- `loading(*ids)`: reads several aggregates' histories in one query (each from its latest snapshot on), so a
  use case that needs a transaction, its customer, account and limit windows pays one round trip; the
  `ReadAhead` it returns, used as `with store.loading(...) as loaded:`, rebuilds them from what was read
  (`loaded.find`, `loaded.customer`, ...). An id named as `LatestOf(id)` has only its latest event read, for
  `loaded.latest_event` (a limit window is built from it alone). The use case hands `loaded` to the helpers
  that read for it (`application.counterparties`, `application.limits`).
- `find(id)`: one aggregate, read now, None when it has no events.
- `latest_event(id)`: an aggregate's latest event, read now, None when it has none.
- by business key, on the store and on a read-ahead alike (`AggregateReads`): `customer`, `account`,
  `transaction`, refusing with the domain's not-found errors; `address_pool`, `get_or_create`.
- `attempts()`: the attempts of a use case that may lose a race on an aggregate version, for the use case's
  own loop, `for attempt in store.attempts(): with attempt: ...` (`Attempt`): a lost race is swallowed and
  the next attempt comes after a jittered backoff; the last lost one ends in `ConcurrencyExhausted`. Safe,
  because a use case records nothing until its one save, and each attempt reads ahead afresh.
- what a use case reads of the log beyond aggregates, each asked of the log (`LedgerLog`, the one door to
  it): `events_of`, `aggregate_at`, `histories_of`, `notifications` and their `decoder`.
- `save(*aggregates, unit=...)`: eventsourcing's save, joining the request's writes (`RequestWrites`,
  `application.store.request_writes`): they go with the events to the recorder, and their write position
  is raised to the notification id reached (read-your-writes).
"""

from __future__ import annotations

import functools
import random
from collections.abc import Callable, Iterator, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar
from uuid import UUID

import anyio.to_thread
from eventsourcing.application import AggregateNotFoundError
from eventsourcing.persistence import Notification, RecordConflictError

from application.store.on_loop import pause, run_on_loop
from application.store.request_writes import RequestWrites
from domain.account import Account
from domain.customer import Customer
from domain.deposits import AddressPool
from domain.errors import AccountNotFound, CustomerNotFound, DomainError, Refusal, TransactionNotFound
from domain.transaction import Transaction

if TYPE_CHECKING:
    from application.store.log import Decode, LedgerLog

A = TypeVar("A")
MAX_ATTEMPTS = 200


class LatestOf(NamedTuple):
    """Names to `LedgerStore.loading` an aggregate of which only the latest event is to be read ahead."""

    aggregate_id: UUID


# Events by aggregate id: histories (from the latest snapshot on), and latest events (None for none).
Histories = dict[UUID, list[Any]]
LatestEvents = dict[UUID, Any]


class ConcurrencyExhausted(DomainError):
    """A use case lost every race with concurrent requests: nothing was recorded, and the same request may
    pass a moment later, so it is answered as a service that cannot serve now (503, Retry-After; an
    Idempotency-Key keeps no such answer)."""

    code = "concurrent_update"
    kind = Refusal.UNAVAILABLE
    title = "Too many concurrent updates"


class Attempt:
    """One attempt of a use case (`LedgerStore.attempts`): leaving its block on a lost race on an aggregate
    version swallows the conflict and waits the backoff before the next attempt."""

    __slots__ = ("lost", "number")

    def __init__(self, number: int) -> None:
        self.number = number
        self.lost = False

    def __enter__(self) -> Attempt:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> bool:
        if kind is None or not issubclass(kind, RecordConflictError):
            return False
        self.lost = True
        pause(random.uniform(0, min(0.05, 0.0005 * 2 ** min(self.number, 10))))
        return True


class AggregateReads:
    """Aggregates by id (`find`, `latest_event`, given by each kind of reads) and by business key: what a
    use case and its helpers read, from the store now or from what a `ReadAhead` read."""

    __slots__ = ()

    def find(self, aggregate_id: UUID) -> Any | None:
        raise NotImplementedError

    def latest_event(self, aggregate_id: UUID) -> Any | None:
        raise NotImplementedError

    def get_or_create(self, aggregate_id: UUID, create: Callable[[], A]) -> A:
        found = self.find(aggregate_id)
        return found if found is not None else create()

    def customer(self, partner: str, code: str) -> Customer:
        return self._named(
            Customer.create_id(partner, code), CustomerNotFound, f"no customer with customerCode {code!r}"
        )

    def account(self, partner: str, code: str) -> Account:
        return self._named(
            Account.create_id(partner, code), AccountNotFound, f"no account with accountCode {code!r}"
        )

    def transaction(self, partner: str, code: str) -> Transaction:
        return self._named(
            Transaction.create_id(partner, code), TransactionNotFound, f"no transaction with code {code!r}"
        )

    def _named(self, aggregate_id: UUID, not_found: type[DomainError], detail: str) -> Any:
        """The aggregate, or the refusal `not_found(detail)`, made only when there is none."""
        aggregate = self.find(aggregate_id)
        if aggregate is None:
            raise not_found(detail)
        return aggregate

    def address_pool(self, crypto: str) -> AddressPool:
        """The crypto-currency's deposit address pool (from its latest snapshot and the events since)."""
        pool = self.find(AddressPool.create_id(crypto))
        return pool if pool is not None else AddressPool(crypto)


class ReadAhead(AggregateReads):
    """What `LedgerStore.loading` read in one query, for the use case that holds it: an aggregate it read is
    rebuilt from what was read, any other is read from the store now. Used as a context manager, it is only
    for a block that saves at its end: what it finds is as of the start of the block, and once the block is
    left every read goes to the store."""

    __slots__ = ("histories", "latest", "store")

    def __init__(self, store: LedgerStore, histories: Histories, latest: LatestEvents) -> None:
        self.store = store
        self.histories = histories
        self.latest = latest

    def __enter__(self) -> ReadAhead:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.histories, self.latest = {}, {}

    def find(self, aggregate_id: UUID) -> Any | None:
        """The aggregate rebuilt from its latest snapshot and the events since (as read ahead, or read now),
        None if it has none."""
        events = self.histories.get(aggregate_id)
        return rebuilt(events) if events is not None else self.store.find(aggregate_id)

    def latest_event(self, aggregate_id: UUID) -> Any | None:
        """The aggregate's latest event (as read ahead, or read now), None if it has none."""
        latest = self.latest
        return latest[aggregate_id] if aggregate_id in latest else self.store.latest_event(aggregate_id)


class LedgerStore(AggregateReads):
    """Load, read ahead, find, attempts and save, on the ledger application's event store."""

    conflicts = RecordConflictError

    def __init__(self, app: LedgerLog) -> None:
        self.app = app

    def save(self, *aggregates: Any, unit: RequestWrites | None = None) -> Any:
        """Saves the aggregates' new events atomically, with the request's writes (`unit`) if there are any
        (the library's save hands them to the recorder, with the events)."""
        recordings = self.app.save(*aggregates, unit=unit)
        if unit is not None:
            unit.note_recorded(recordings)
        return recordings

    async def run(self, use_case: Callable[..., A], *args: Any, **kwargs: Any) -> A:
        """`use_case(*args, **kwargs)` run for a request on the event loop: in a greenlet on the loop when the
        recorder awaits its reads and saves there (`application.store.on_loop`: no thread, no hand-offs),
        else (the library's recorder) in a worker thread."""
        if self.app.waits_on_loop:
            return await run_on_loop(use_case, *args, **kwargs)
        return await anyio.to_thread.run_sync(functools.partial(use_case, *args, **kwargs))

    def attempts(self) -> Iterator[Attempt]:
        """The attempts of a use case, each a block to run under `with attempt:` that returns when it saved:
        one that lost a race on an aggregate version is followed by the next, after a jittered backoff; after
        the last lost one, `ConcurrencyExhausted`."""
        for number in range(MAX_ATTEMPTS):
            attempt = Attempt(number)
            yield attempt
            if not attempt.lost:
                return
        raise ConcurrencyExhausted(
            f"the request lost {MAX_ATTEMPTS} races with concurrent requests; try again"
        )

    def loading(self, *reads: UUID | LatestOf) -> ReadAhead:
        """Reads the events of these aggregates in one query (of those named as `LatestOf`, the latest only),
        for `with store.loading(...) as loaded:`. With the library's recorder, which has no such query,
        nothing is read ahead and `loaded` reads each aggregate when asked."""
        read = self._read_ahead(reads)
        return ReadAhead(self, *read) if read is not None else ReadAhead(self, {}, {})

    def find(self, aggregate_id: UUID) -> Any | None:
        """The aggregate rebuilt from its latest snapshot and the events since, read now; None if it has
        none."""
        read = self._read_ahead((aggregate_id,))
        if read is None:
            try:
                return self.app.repository.get(aggregate_id)
            except AggregateNotFoundError:
                return None
        return rebuilt(read[0][aggregate_id])

    def latest_event(self, aggregate_id: UUID) -> Any | None:
        """The aggregate's latest event, read now; None if it has none."""
        stored = self.app.recorder.select_events(aggregate_id, desc=True, limit=1)
        return self.app.mapper.to_domain_event(stored[0]) if stored else None

    def events_of(self, aggregate_id: UUID) -> list[Any]:
        """Every event of the aggregate, oldest first, from its first; none for an unknown id."""
        return self.app.events_of(aggregate_id)

    def aggregate_at(self, aggregate_id: UUID, version: int) -> Any:
        """The aggregate as its events up to `version` left it."""
        return self.app.aggregate_at(aggregate_id, version)

    def histories_of(self, ids: Sequence[UUID]) -> Histories:
        """The whole histories of these aggregates, oldest event first, in one query (every id a key)."""
        return self.app.histories_of(ids)

    def notifications(self, start: int, limit: int, *, topics: Sequence[str] = ()) -> Sequence[Notification]:
        """At most `limit` stored events from notification id `start` on (of `topics` only, when named)."""
        return self.app.notifications(start, limit, topics=topics)

    @property
    def decoder(self) -> Decode:
        """A stored event's domain event (taken once by a caller that decodes many)."""
        return self.app.decoder

    def _read_ahead(self, reads: Sequence[UUID | LatestOf]) -> tuple[Histories, LatestEvents] | None:
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
        histories: Histories = {aggregate_id: [] for aggregate_id in ids}
        latest: LatestEvents = dict.fromkeys(latest_ids)
        for stored in stored_events:
            domain_event = self.app.mapper.to_domain_event(stored)
            if stored.originator_id in latest:
                latest[stored.originator_id] = domain_event
            else:
                histories[stored.originator_id].append(domain_event)
        return histories, latest


def rebuilt(events: list[Any]) -> Any | None:
    """The aggregate its events (from its first, or from its latest snapshot on) make, None when there are
    none: what a read and an `asOf` replay (`application.history`) both rebuild."""
    aggregate = None
    for domain_event in events:
        aggregate = domain_event.mutate(aggregate)
    return aggregate
