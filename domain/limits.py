"""Trust-level limits: one window per customer, direction and calendar period (UTC day or month).

A transaction reserves its volume (in the base currency) in its day and its month window, saved in the
same atomic recording as the transaction: two concurrent transactions that both fit alone but not together
conflict on the window's version, and the retry sees the other's reservation.

Each `Reserved` and `Released` carries `used`, the window's total after it, so a window loads from its latest
event alone (`LimitWindow.as_left_by`), however many orders its period holds. The window keeps no list of
its orders: an order reserves once because its transaction is created once (a create finds the transaction
a retry recorded, and two creates of one code conflict on the transaction's version), and gives back once
because its transaction is cancelled once; the windows are saved with the transaction, so neither can happen
without the other. Events recorded before they carried `used` still replay: such a window is rebuilt from
its history, keeping its reservations by transaction as it then did, until its next event.
"""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from typing import Any
from uuid import UUID

from eventsourcing.domain import Aggregate, event
from eventsourcing.utils import get_topic

from domain.errors import TrustLevelLimitExceeded
from domain.ids import business_id
from domain.money import add, normalized, subtract

PERIODS = ("daily", "monthly")
# Per transaction, what a window replayed from events recorded before they carried `used` holds.
LEGACY_RESERVATIONS = "reservations"


def period_key(period: str, at: datetime) -> str:
    """The window's key of `at`'s period: its day (YYYY-MM-DD) or month (YYYY-MM). By the date's ISO form,
    a seventh of `strftime`'s cost (a buy computes its windows' keys several times)."""
    day = at.date().isoformat()
    return day if period == "daily" else day[:7]


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

    @classmethod
    def as_left_by(
        cls, last: Any, partner: str, customer_code: str, direction: str, period: str, key: str
    ) -> LimitWindow | None:
        """The window (of this identity) as its latest event `last` left it, built without its history; None
        when `last` does not carry the total (recorded before events did): then replay the history. Its
        `created_on` is not known without its first event, and is None."""
        if isinstance(last, LimitWindow.Opened):
            return last.mutate(None)
        used = getattr(last, "used", None)
        if used is None:
            return None
        state = {
            "_created_on": None,
            "_modified_on": last.timestamp,
            "partner": partner,
            "customer_code": customer_code,
            "direction": direction,
            "period": period,
            "key": key,
            "used": used,
        }
        left = cls.Snapshot(
            originator_id=last.originator_id,
            originator_version=last.originator_version,
            timestamp=last.timestamp,
            topic=get_topic(cls),
            state=state,
        )
        return left.mutate(None)

    def remaining(self, limit: Decimal) -> Decimal:
        return max(subtract(limit, self.used), Decimal(0))

    def reserve(self, transaction_code: str, amount: Decimal, limit: Decimal, currency: str) -> None:
        """Counts `amount` against this window, refused when the total would pass `limit`. Called once per
        transaction (see the module docstring)."""
        used = add(self.used, amount)
        if used > limit:
            raise TrustLevelLimitExceeded(
                f"this {self.direction} of {normalized(amount)} {currency} would exceed the customer's "
                f"{self.period} {self.direction} limit of {normalized(limit)} {currency} "
                f"({normalized(self.remaining(limit))} {currency} remaining for {self.key})"
            )
        self._reserve(transaction_code, amount, used)

    @event("Reserved")
    def _reserve(self, transaction_code: str, amount: Decimal, used: Decimal | None = None) -> None:
        if used is None:  # recorded before events carried the total
            self._legacy_reservations()[transaction_code] = amount
            self.used = add(self.used, amount)
        else:
            self._counted(used)

    def release(self, transaction_code: str, amount: Decimal) -> None:
        """Gives back `amount`, what a cancelled transaction reserved (its order's limit amount). Called once,
        when the transaction is cancelled (see the module docstring)."""
        self._release(transaction_code, amount, subtract(self.used, amount))

    @event("Released")
    def _release(
        self, transaction_code: str, amount: Decimal | None = None, used: Decimal | None = None
    ) -> None:
        if used is None:  # recorded before events carried the total: what the transaction had reserved
            self.used = subtract(self.used, self._legacy_reservations().pop(transaction_code))
        else:
            self._counted(used)

    def _counted(self, used: Decimal) -> None:
        """The total an event carries; what a window replayed from older events kept per transaction is no
        longer needed (so the window is the same, replayed or built from its latest event)."""
        self.used = used
        self.__dict__.pop(LEGACY_RESERVATIONS, None)

    def _legacy_reservations(self) -> dict[str, Decimal]:
        return self.__dict__.setdefault(LEGACY_RESERVATIONS, {})
