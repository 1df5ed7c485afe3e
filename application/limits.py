"""Use cases of the trust-level limits: reserving a new order's amount in its customer's day and month
windows, giving it back when the order is cancelled, and what is used and left.

A window is loaded from its latest event, which carries its total (`LimitWindow.as_left_by`): one event
read, as `window_reads` name them to `LedgerStore.loading`, whatever the window's history (the use case hands
its read-ahead to `reserve`). A window whose latest event was recorded before events carried the total is
rebuilt from its history instead.

What was used at an instant (`usage_at`, `GET /customer/{code}/limits?asOf=`) is replayed from the log: the
customer as its events up to then left it, and each window of that instant's day and month replayed up to
then. A window's events carry no time of their own by the ledger's clock (their `timestamp` is the store's),
but each rides with a change of the transaction it names, saved together: a `Reserved` with the transaction's
creation, a `Released` with its cancellation. Their time is that change's (`happened_at`, the time base of
every `asOf`), read from the transactions' events in one query."""

from __future__ import annotations

import itertools
from collections import defaultdict
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any
from uuid import UUID

from application.commands import LimitUsage
from application.context import Context
from application.history import happened_at
from application.store.aggregates import AggregateReads, LatestOf, rebuilt
from domain.customer import Customer
from domain.errors import CustomerNotFound
from domain.limits import PERIODS, LimitWindow, period_key
from domain.transaction import Order, Status, Transaction, TransactionType

DIRECTIONS = ("buy", "sell")


def direction_of(order: Order) -> str:
    return "buy" if order.type == TransactionType.BUY else "sell"


class Limits:
    def __init__(self, context: Context) -> None:
        self.context = context
        self.store = context.store

    def reserve(
        self, loaded: AggregateReads, customer: Customer, direction: str, order: Order, at: datetime
    ) -> list[LimitWindow]:
        """The customer's windows holding the order's amount (unsaved), as the use case `loaded` them;
        `TrustLevelLimitExceeded` if over."""
        settings = self.context.settings
        level = settings.trust_levels[customer.trust_level]
        windows = []
        for period in PERIODS:
            window = self.window(loaded, customer.partner, customer.code, direction, period, at)
            window.reserve(
                order.code, order.limit_amount, level.limit(direction, period), settings.base_currency
            )
            windows.append(window)
        return windows

    def release(self, transaction: Transaction) -> list[LimitWindow]:
        """The windows of the transaction's order with its reservation given back (unsaved)."""
        order = transaction.order
        windows = []
        for period in PERIODS:
            window = self.window(
                self.store,
                order.partner,
                order.customer_code,
                direction_of(order),
                period,
                transaction.created,
            )
            window.release(order.code, order.limit_amount)
            windows.append(window)
        return windows

    def taken_again(self, transaction: Transaction, customer: Customer, order: Order) -> list[LimitWindow]:
        """The windows of the transaction's order with its reservation given back and `order`'s amount
        reserved instead (unsaved), as a BLOCKED sell priced again on the amount received takes them;
        `TrustLevelLimitExceeded` if over."""
        settings = self.context.settings
        level = settings.trust_levels[customer.trust_level]
        windows = self.release(transaction)
        for window in windows:
            limit = level.limit(window.direction, window.period)
            window.reserve(order.code, order.limit_amount, limit, settings.base_currency)
        return windows

    def window(
        self,
        reads: AggregateReads,
        partner: str,
        customer_code: str,
        direction: str,
        period: str,
        at: datetime,
    ) -> LimitWindow:
        """The window of `at` as `reads` has it, a new one if it has no events."""
        key = period_key(period, at)
        found = self.found(reads, partner, customer_code, direction, period, key)
        return found if found is not None else LimitWindow(partner, customer_code, direction, period, key)

    def found(
        self, reads: AggregateReads, partner: str, customer_code: str, direction: str, period: str, key: str
    ) -> LimitWindow | None:
        """The window as its latest event left it (as a read-ahead has it, or read now), None if it has no
        events; rebuilt from its history when that event does not carry the total."""
        window_id = LimitWindow.create_id(partner, customer_code, direction, key)
        latest = reads.latest_event(window_id)
        if latest is None:
            return None
        window = LimitWindow.as_left_by(latest, partner, customer_code, direction, period, key)
        return window if window is not None else reads.find(window_id)

    def usage(self, partner: str, customer_code: str) -> list[LimitUsage]:
        """Each window of the customer now: its limit, what is used and what is left."""
        now = self.context.clock.now()
        reads = [
            read for direction in DIRECTIONS for read in window_reads(partner, customer_code, direction, now)
        ]
        with self.store.loading(Customer.create_id(partner, customer_code), *reads) as loaded:
            customer = loaded.customer(partner, customer_code)
            usages = []
            for direction, period in itertools.product(DIRECTIONS, PERIODS):
                key = period_key(period, now)
                window = self.found(loaded, partner, customer_code, direction, period, key)
                usages.append(self._usage(customer, direction, period, key, window))
        return usages

    def usage_at(self, partner: str, customer_code: str, at: datetime) -> tuple[Customer, list[LimitUsage]]:
        """The customer as it stood at `at` and each of its windows of that instant's UTC day and month then:
        its limit by the trust level of then, what was used and what was left, replayed from the log
        (`CustomerNotFound` for a customer not registered yet at `at`)."""
        customer = self._customer_at(partner, customer_code, at)
        utc = at.astimezone(UTC)
        usages = []
        for direction, period in itertools.product(DIRECTIONS, PERIODS):
            key = period_key(period, utc)
            window = self._window_at(partner, customer_code, direction, key, at)
            usages.append(self._usage(customer, direction, period, key, window))
        return customer, usages

    def _usage(
        self, customer: Customer, direction: str, period: str, key: str, window: LimitWindow | None
    ) -> LimitUsage:
        """One window's usage by the customer's trust level (an empty window when `window` is None)."""
        settings = self.context.settings
        limit = settings.trust_levels[customer.trust_level].limit(direction, period)
        used = window.used if window else Decimal(0)
        return LimitUsage(
            direction=direction,
            period=period,
            key=key,
            currency=settings.base_currency,
            limit=limit,
            used=used,
            remaining=max(limit - used, Decimal(0)),
        )

    def _customer_at(self, partner: str, customer_code: str, at: datetime) -> Customer:
        events = self._events(Customer.create_id(partner, customer_code))
        upto = [event for event in events if happened_at(event) <= at]
        if not events:
            raise CustomerNotFound(f"no customer with customerCode {customer_code!r}")
        if not upto:
            raise CustomerNotFound(f"customer {customer_code!r} was not registered yet at {at.isoformat()}")
        return rebuilt(upto)

    def _window_at(
        self, partner: str, customer_code: str, direction: str, key: str, at: datetime
    ) -> LimitWindow | None:
        """The window replayed from its events up to the first that happened after `at` (None if none had):
        a window's events follow the ledger's clock in their order, as the changes they ride with do."""
        events = self._events(LimitWindow.create_id(partner, customer_code, direction, key))
        times = self._times_of_changes(partner, events)
        upto = []
        for event in events:
            of_change = times.get((type(event).__name__, getattr(event, "transaction_code", None)))
            when = of_change.pop(0) if of_change else None  # a transaction's changes in their order
            if when is not None and when > at:
                break
            upto.append(event)
        return rebuilt(upto) if any(not isinstance(e, LimitWindow.Opened) for e in upto) else None

    def _times_of_changes(self, partner: str, events: list[Any]) -> dict[tuple[str, str], list[datetime]]:
        """By (event name, transaction code), in their order: when each change of the transaction that a
        window's event rode with happened (`window_moves`)."""
        codes = {e.transaction_code for e in events if hasattr(e, "transaction_code")}
        ids = {Transaction.create_id(partner, code): code for code in codes}
        times: dict[tuple[str, str], list[datetime]] = defaultdict(list)
        for aggregate_id, history in self.store.histories_of(list(ids)).items():
            code = ids[aggregate_id]
            transaction = None
            for event in history:
                before = transaction.status if transaction is not None else None
                transaction = event.mutate(transaction)
                for name in window_moves(before, event, transaction.status):
                    times[name, code].append(happened_at(event))
        return times

    def _events(self, aggregate_id: UUID) -> list[Any]:
        return self.store.events_of(aggregate_id)


def window_moves(before: Status | None, event: Any, after: Status) -> tuple[str, ...]:
    """The window events (by name, in their order) that ride with a transaction's event: its creation
    reserves; a cancellation, and a refund of a BLOCKED sell, release; a BLOCKED sell's amount accepted
    releases the old reservation and reserves the new one."""
    if before is None:
        return ("Reserved",)
    if isinstance(event, Transaction.ReceivedAccepted):
        return ("Released", "Reserved")
    if after == Status.CANCELLED and before != Status.CANCELLED:
        return ("Released",)
    if before == Status.BLOCKED and after in (Status.REFUNDING, Status.REFUNDED):
        return ("Released",)
    return ()


def window_reads(partner: str, customer_code: str, direction: str, at: datetime) -> list[LatestOf]:
    """What loading the customer's windows of `direction` at `at` reads ahead: each one's latest event."""
    return [
        LatestOf(LimitWindow.create_id(partner, customer_code, direction, period_key(period, at)))
        for period in PERIODS
    ]
