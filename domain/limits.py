"""Trust-level limits: one window per customer, direction and calendar period (UTC day or month).

A transaction reserves its volume (in the base currency) in its day and its month window, saved in the
same atomic recording as the transaction: two concurrent transactions that both fit alone but not together
conflict on the window's version, and the retry sees the other's reservation.
"""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from uuid import UUID

from eventsourcing.domain import Aggregate, event

from domain.errors import TrustLevelLimitExceeded
from domain.ids import business_id
from domain.money import add, normalized, subtract

PERIODS = ("daily", "monthly")


def period_key(period: str, at: datetime) -> str:
    return at.strftime("%Y-%m-%d") if period == "daily" else at.strftime("%Y-%m")


class LimitWindow(Aggregate):
    @staticmethod
    def create_id(partner: str, customer_code: str, direction: str, key: str, **_: object) -> UUID:
        return business_id("limit-window", partner, customer_code, direction, key)

    @event("Opened")
    def __init__(self, partner: str, customer_code: str, direction: str, period: str, key: str) -> None:
        self.partner = partner
        self.customer_code = customer_code
        self.direction = direction
        self.period = period
        self.key = key
        self.used = Decimal(0)
        self.reservations: dict[str, Decimal] = {}

    def remaining(self, limit: Decimal) -> Decimal:
        return max(subtract(limit, self.used), Decimal(0))

    def reserve(self, transaction_code: str, amount: Decimal, limit: Decimal, currency: str) -> None:
        """Counts `amount` against this window, refused when the total would pass `limit`."""
        if transaction_code in self.reservations:
            return
        if add(self.used, amount) > limit:
            raise TrustLevelLimitExceeded(
                f"this {self.direction} of {normalized(amount)} {currency} would exceed the customer's "
                f"{self.period} {self.direction} limit of {normalized(limit)} {currency} "
                f"({normalized(self.remaining(limit))} {currency} remaining for {self.key})"
            )
        self._reserve(transaction_code, amount)

    @event("Reserved")
    def _reserve(self, transaction_code: str, amount: Decimal) -> None:
        self.reservations[transaction_code] = amount
        self.used = add(self.used, amount)

    def release(self, transaction_code: str) -> None:
        """Gives back what a cancelled transaction reserved."""
        if transaction_code in self.reservations:
            self._release(transaction_code)

    @event("Released")
    def _release(self, transaction_code: str) -> None:
        amount = self.reservations.pop(transaction_code)
        self.used = subtract(self.used, amount)
