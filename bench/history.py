"""A ledger's history made through its use cases: customer addresses of the demo keys, and a driver that says
each use case in a few words and records what it made.

bench/rebuild.py fills an event store with it, and the projection tests replay what it made
(tests/projections/scenario.py); it lives under bench/ because the benchmarks import nothing from tests/.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from application.adapters.addresses import Bip32AddressBook
from application.commands import BuyRequest, DepositReport, SellRequest, SendoutReport
from application.settings import Settings
from application.use_cases import UseCases
from domain.transaction import Transaction

# Customers' addresses are derived from the demo keys from this index up, so they are valid addresses and
# never one of the service's own deposit addresses (those are handed out from index 0).
FIRST_CUSTOMER_ADDRESS_INDEX = 1000


class CustomerAddresses:
    """Valid customer addresses of the demo keys, each handed out once by this source."""

    def __init__(self, settings: Settings) -> None:
        self._book = Bip32AddressBook(settings.cryptos)
        self._indexes = itertools.count(FIRST_CUSTOMER_ADDRESS_INDEX)

    def next(self, crypto: str = "BTC") -> str:
        return self._book.derive(crypto, next(self._indexes)).address


@dataclass
class Scenario:
    """What was done: the codes of every customer, account and transaction, with their partner."""

    customers: list[tuple[str, str]] = field(default_factory=list)
    accounts: list[tuple[str, str]] = field(default_factory=list)
    transactions: list[tuple[str, str]] = field(default_factory=list)

    def track(self, transaction: Transaction) -> Transaction:
        self.transactions.append((transaction.order.partner, transaction.code))
        return transaction


class Driver:
    """The ledger's use cases in a few words each, recording what they made in a `Scenario`."""

    def __init__(self, use_cases: UseCases, clock: Any, addresses: Any) -> None:
        self.use_cases = use_cases
        self.clock = clock
        self.addresses = addresses
        self.done = Scenario()
        self.wallets: dict[tuple[str, str], tuple[str, str]] = {}

    def customer(self, partner: str, code: str, activate_later: bool = False) -> None:
        status = None if activate_later else "ACTIVE"
        self.use_cases.customers.register_customer(partner, code, "Basic", status=status, currency="EUR")
        if activate_later:
            self.use_cases.customers.activate_customer(partner, code, "ACTIVE")
        address = self.addresses.next("BTC")
        account, _ = self.use_cases.customers.open_account(partner, code, address)
        self.wallets[partner, code] = (address, account.code)
        self.done.customers.append((partner, code))
        self.done.accounts.append((partner, account.code))

    def buy(self, partner: str, customer: str, fiat: str, stage: bool = True, **extra: Any) -> Transaction:
        address, _ = self.wallets[partner, customer]
        request = BuyRequest(
            customer_code=customer,
            currency="EUR",
            crypto="BTC",
            fiat_value=Decimal(fiat),
            destination_address=address,
            payment_method="BANK_EUR_BUY",
            **extra,
        )
        return self.done.track(self.use_cases.buys.create(partner, request, stage=stage))

    def sell(self, partner: str, customer: str, crypto: str, **extra: Any) -> Transaction:
        _, account = self.wallets[partner, customer]
        request = SellRequest(
            customer_code=customer,
            account_code=account,
            currency="EUR",
            crypto="BTC",
            payment_method="BANK_EUR_SELL",
            crypto_amount=Decimal(crypto),
            **extra,
        )
        return self.done.track(self.use_cases.sells.create(partner, request))

    def sendout(self, buy: Transaction, confirmations: int) -> None:
        report = SendoutReport(
            transaction_code=buy.code, tx_id=f"out-{buy.code}", confirmations=confirmations
        )
        self.use_cases.settlement.report_sendout(buy.order.partner, report)

    def deposit(self, sell: Transaction, confirmations: int, amount: Decimal | None = None) -> None:
        report = DepositReport(
            crypto="BTC",
            address=sell.order.destination_address,
            tx_id=f"in-{sell.code}",
            crypto_amount=sell.order.quote.crypto_amount if amount is None else amount,
            confirmations=confirmations,
        )
        self.use_cases.settlement.report_deposit(sell.order.partner, report)
