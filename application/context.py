"""What every use-case module is built from: the store, the settings, the adapters and the clock."""

from __future__ import annotations

import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial

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

    # A new order desk, one per request: its own checks and its priced order (it reads and writes nothing,
    # and remembers the callback URLs it has checked, so it is never shared between requests). A partial of
    # the desk's class rather than a method, so that making one is a call into `application.orders` alone.
    new_desk: Callable[[], OrderDesk] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        desk = partial(OrderDesk, self.settings, self.prices, self.callback_urls, addresses=self.addresses)
        object.__setattr__(self, "new_desk", desk)


def new_transaction_code() -> str:
    return "TX" + secrets.token_hex(8).upper()
