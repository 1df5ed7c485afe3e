"""Ports: what the ledger needs from the world, as protocols. Adapters live in `application.adapters`."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Protocol

from domain.callback_urls import CallbackUrl
from domain.pricing import Price


class PriceSource(Protocol):
    def price(self, crypto: str, currency: str) -> Price:
        """Current buy and sell price of one unit of `crypto` in fiat `currency`.

        Raises `domain.errors.PriceUnavailable` when there is no price, or none fresh enough.
        """
        ...


@dataclass(frozen=True)
class DerivedAddress:
    address: str
    path: str  # BIP32 derivation path, e.g. "m/84'/0'/0'/0/7"


class AddressBook(Protocol):
    """Deposit address derivation and validation of customers' addresses."""

    def derive(self, crypto: str, index: int) -> DerivedAddress:
        """The service's deposit address number `index` for `crypto`, from its extended public key."""
        ...

    def is_valid(self, crypto: str, address: str) -> bool:
        """Whether `address` is a valid address of `crypto`'s network (checksum and network)."""
        ...

    def cryptos_for(self, address: str) -> list[str]:
        """The configured crypto codes for which `address` is valid, sorted."""
        ...


class CallbackUrlCheck(Protocol):
    """Judges the callback URL a request names. The static rules are `domain.callback_urls`; the service
    wires `projections.callbacks.urls.CallbackUrlPolicy`, which also resolves a host name and judges its
    addresses (without one, the ledger applies the static rules only)."""

    def parse(self, url: str) -> CallbackUrl:
        """The URL's parts if it passes the static rules (no I/O); `CallbackUrlRefused` otherwise."""
        ...

    def accept(self, url: str) -> CallbackUrl:
        """The URL's parts if it passes the static rules and its host's addresses now are acceptable."""
        ...


class Clock(Protocol):
    def now(self) -> datetime: ...


class SystemClock:
    def now(self) -> datetime:
        return datetime.now(UTC)
