"""Use cases of the trust-level limits: reserving a new order's amount in its customer's day and month
windows, giving it back when the order is cancelled, and what is used and left.

A window is loaded from its latest event, which carries its total (`LimitWindow.as_left_by`): one event
read, as `window_reads` name them to `LedgerStore.loading`, whatever the window's history (the use case hands
its read-ahead to `reserve`). A window whose latest event was recorded before events carried the total is
rebuilt from its history instead."""

from __future__ import annotations

import itertools
from datetime import datetime
from decimal import Decimal

from application.commands import LimitUsage
from application.context import Context
from application.store.aggregates import AggregateReads, LatestOf
from domain.customer import Customer
from domain.limits import PERIODS, LimitWindow, period_key
from domain.transaction import Order, Transaction, TransactionType

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
        settings = self.context.settings
        now = self.context.clock.now()
        reads = [
            read for direction in DIRECTIONS for read in window_reads(partner, customer_code, direction, now)
        ]
        with self.store.loading(Customer.create_id(partner, customer_code), *reads) as loaded:
            customer = loaded.customer(partner, customer_code)
            level = settings.trust_levels[customer.trust_level]
            usages = []
            for direction, period in itertools.product(DIRECTIONS, PERIODS):
                key = period_key(period, now)
                window = self.found(loaded, partner, customer_code, direction, period, key)
                limit = level.limit(direction, period)
                used = window.used if window else Decimal(0)
                usages.append(
                    LimitUsage(
                        direction=direction,
                        period=period,
                        key=key,
                        currency=settings.base_currency,
                        limit=limit,
                        used=used,
                        remaining=max(limit - used, Decimal(0)),
                    )
                )
        return usages


def window_reads(partner: str, customer_code: str, direction: str, at: datetime) -> list[LatestOf]:
    """What loading the customer's windows of `direction` at `at` reads ahead: each one's latest event."""
    return [
        LatestOf(LimitWindow.create_id(partner, customer_code, direction, period_key(period, at)))
        for period in PERIODS
    ]
