"""Deposit addresses: a counter per crypto hands out derivation indexes, and each address handed to a
sell is indexed so that a chain report naming the address finds its transaction."""

from __future__ import annotations

from datetime import datetime
from uuid import UUID

from eventsourcing.domain import Aggregate, event

from domain.ids import business_id


class AddressPool(Aggregate):
    """Hands out the derivation indexes of one crypto-currency's deposit addresses, each once."""

    @staticmethod
    def create_id(crypto: str, **_: object) -> UUID:
        return business_id("address-pool", crypto)

    @event("Created")
    def __init__(self, crypto: str) -> None:
        self.crypto = crypto
        self.next_index = 0

    def allocate(self, purpose: str) -> int:
        index = self.next_index
        self._allocate(index, purpose)
        return index

    @event("Allocated")
    def _allocate(self, index: int, purpose: str) -> None:
        self.next_index = index + 1


class DepositAddress(Aggregate):
    """A single-use deposit address given to one sell transaction."""

    @staticmethod
    def create_id(crypto: str, address: str, **_: object) -> UUID:
        return business_id("deposit-address", crypto, address)

    @event("Assigned")
    def __init__(
        self,
        crypto: str,
        address: str,
        path: str,
        partner: str,
        transaction_code: str,
        at: datetime,
    ) -> None:
        self.crypto = crypto
        self.address = address
        self.path = path
        self.partner = partner
        self.transaction_code = transaction_code
        self.assigned = at
