"""Application fixtures: the demo settings, a settable clock, `Ledger`s on a fresh PostgreSQL schema, and the
use cases on them.

Customers' addresses are derived from the demo keys at indexes from 1000 up
(`bench.history.CustomerAddresses`), so they are valid addresses and never one of the service's own deposit
addresses (those are handed out from index 0).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from application.adapters.addresses import Bip32AddressBook
from application.adapters.prices import FixedPrices
from application.ledger import Ledger
from application.settings import Settings, load_settings
from application.use_cases import UseCases
from bench.clock import FakeClock
from bench.history import CustomerAddresses
from domain.account import Account
from domain.customer import Customer


@pytest.fixture(scope="session")
def settings() -> Settings:
    return load_settings()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def addresses(settings: Settings) -> CustomerAddresses:
    return CustomerAddresses(settings)


@pytest.fixture
def make_ledger(
    settings: Settings, clock: FakeClock, postgres_env: dict[str, str]
) -> Iterator[Callable[..., Ledger]]:
    """Builds `Ledger`s on this test's schema (or on `env`); all are closed at teardown."""
    made: list[Ledger] = []

    def make(env: dict[str, str] | None = None) -> Ledger:
        ledger = Ledger(settings, clock, env=env if env is not None else postgres_env)
        made.append(ledger)
        return ledger

    yield make
    for ledger in made:
        ledger.close()


@pytest.fixture
def ledger(make_ledger: Callable[..., Ledger]) -> Ledger:
    return make_ledger()


def use_cases_of(ledger: Ledger) -> UseCases:
    """The use cases on `ledger`, with the demo's fixed prices (on the ledger's clock) and addresses."""
    settings = ledger.settings
    return UseCases.of(ledger, FixedPrices(settings, ledger.clock), Bip32AddressBook(settings.cryptos))


@pytest.fixture
def make_use_cases(make_ledger: Callable[..., Ledger]) -> Callable[..., UseCases]:
    """Builds the use cases on a new `Ledger` of this test's schema (or of `env`)."""

    def make(env: dict[str, str] | None = None) -> UseCases:
        return use_cases_of(make_ledger(env))

    return make


@pytest.fixture
def use_cases(ledger: Ledger) -> UseCases:
    """The use cases on the test's `ledger`."""
    return use_cases_of(ledger)


def register_active(use_cases: UseCases, partner: str, code: str, trust_level: str = "Basic") -> Customer:
    return use_cases.customers.register_customer(partner, code, trust_level, status="ACTIVE")


def open_btc_account(use_cases: UseCases, partner: str, customer_code: str, address: str) -> Account:
    account, _ = use_cases.customers.open_account(partner, customer_code, address)
    return account


@pytest.fixture
def active_customer_with_btc_account(
    use_cases: UseCases, addresses: CustomerAddresses
) -> Callable[..., tuple[Customer, Account]]:
    """Registers an ACTIVE customer and opens a BTC account for it with the test's `use_cases`."""

    def make(partner: str, code: str, trust_level: str = "Basic") -> tuple[Customer, Account]:
        register_active(use_cases, partner, code, trust_level)
        account = open_btc_account(use_cases, partner, code, addresses.next("BTC"))
        return use_cases.customers.customer(partner, code), account

    return make


@pytest.fixture
def pooled_env(postgres_env: dict[str, str]) -> dict[str, str]:
    """This test's schema, with connections for racing threads: loads take turns on 4 (the suite's budget is
    40 at once on a shared server, over the xdist workers), and saves share the group committer's."""
    return {**postgres_env, "POSTGRES_POOL_SIZE": "0", "POSTGRES_MAX_OVERFLOW": "4"}


def race(threads: int, action: Callable[[int], Any]) -> list[Any]:
    """Runs `action(i)` in `threads` threads released together; each result or raised exception."""
    start = threading.Barrier(threads)

    def attempt(i: int) -> Any:
        start.wait()
        try:
            return action(i)
        except Exception as error:
            return error

    with ThreadPoolExecutor(max_workers=threads) as pool:
        return list(pool.map(attempt, range(threads)))
