"""What every use-case module is built from: the store, the settings, the adapters and the clock."""

from __future__ import annotations

import secrets
from dataclasses import dataclass

from application.orders import OrderDesk
from application.ports import AddressBook, CallbackUrlCheck, Clock, PriceSource
from application.settings import Settings
from application.store.aggregates import LedgerStore


@dataclass(frozen=True)
class Context:
    store: LedgerStore
    settings: Settings
    prices: PriceSource
    addresses: AddressBook
    clock: Clock
    callback_urls: CallbackUrlCheck | None = None  # None: requested callback URLs get the static rules only

    @property
    def desk(self) -> OrderDesk:
        """The order desk: a request's own checks and its priced order (reads and writes nothing)."""
        return OrderDesk(self.settings, self.prices, self.callback_urls, addresses=self.addresses)


def new_transaction_code() -> str:
    return "TX" + secrets.token_hex(8).upper()
