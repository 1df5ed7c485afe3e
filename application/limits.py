"""Use cases of the trust-level limits: reserving a new order's amount in its customer's day and month
windows, giving it back when the order is cancelled, and what is used and left."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal

from application.commands import LimitUsage
from application.context import Context
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

    def reserve(self, customer: Customer, direction: str, order: Order, at: datetime) -> list[LimitWindow]:
        """The customer's windows holding the order's amount (unsaved); `TrustLevelLimitExceeded` if over."""
        settings = self.context.settings
        level = settings.trust_levels[customer.trust_level]
        windows = []
        for period in PERIODS:
            window = self.window(customer.partner, customer.code, direction, period, at)
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
                order.partner, order.customer_code, direction_of(order), period, transaction.created
            )
            window.release(order.code)
            windows.append(window)
        return windows

    def window(
        self, partner: str, customer_code: str, direction: str, period: str, at: datetime
    ) -> LimitWindow:
        key = period_key(period, at)
        return self.store.get_or_create(
            LimitWindow.create_id(partner, customer_code, direction, key),
            lambda: LimitWindow(partner, customer_code, direction, period, key),
        )

    def usage(self, partner: str, customer_code: str) -> list[LimitUsage]:
        """Each window of the customer now: its limit, what is used and what is left."""
        settings = self.context.settings
        customer = self.store.customer(partner, customer_code)
        level = settings.trust_levels[customer.trust_level]
        now = self.context.clock.now()
        usages = []
        for direction in DIRECTIONS:
            for period in PERIODS:
                key = period_key(period, now)
                window = self.store.find(LimitWindow.create_id(partner, customer_code, direction, key))
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
