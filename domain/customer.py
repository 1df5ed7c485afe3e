"""The customer of a partner: created NEW or ACTIVE, activated once, owning accounts."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from uuid import UUID

from eventsourcing.domain import Aggregate, event

from domain.errors import InvalidStateTransition
from domain.ids import business_id


class CustomerStatus(StrEnum):
    NEW = "NEW"
    ACTIVE = "ACTIVE"


class Customer(Aggregate):
    @staticmethod
    def create_id(partner: str, code: str, **_: object) -> UUID:
        return business_id("customer", partner, code)

    @event("Registered")
    def __init__(
        self,
        partner: str,
        code: str,
        trust_level: str,
        status: str,
        currency: str | None,
        portfolio: str | None,
        at: datetime,
    ) -> None:
        self.partner = partner
        self.code = code
        self.trust_level = trust_level
        self.status = status
        self.currency = currency
        self.portfolio = portfolio
        self.created = at
        self.updated = at
        self.account_codes: list[str] = []

    @property
    def is_active(self) -> bool:
        return self.status == CustomerStatus.ACTIVE

    def activate(self, at: datetime) -> None:
        """NEW becomes ACTIVE; activating an active customer changes nothing."""
        if self.status == CustomerStatus.ACTIVE:
            return
        if self.status != CustomerStatus.NEW:
            raise InvalidStateTransition(f"customer {self.code} is {self.status}, not NEW")
        self._activate(at)

    @event("Activated")
    def _activate(self, at: datetime) -> None:
        self.status = CustomerStatus.ACTIVE
        self.updated = at

    def link_account(self, account_code: str, at: datetime) -> None:
        if account_code not in self.account_codes:
            self._link_account(account_code, at)

    @event("AccountLinked")
    def _link_account(self, account_code: str, at: datetime) -> None:
        self.account_codes.append(account_code)
        self.updated = at
