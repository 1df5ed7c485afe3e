"""A ledger driven through every kind of event: customers of two partners, buys and sells into every status,
cancellations, over two days. The projection tests replay it and compare the read models with it."""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from application.commands import BuyRequest, DepositReport, SellRequest, SendoutReport
from application.ledger import Ledger
from domain.transaction import Transaction
from projections.catalog import READ_MODELS

__all__ = ["READ_MODELS", "Scenario", "populate"]


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
    """Use cases of `ledger` in a few words each, recording what they made in a `Scenario`."""

    def __init__(self, ledger: Ledger, clock: Any, addresses: Any) -> None:
        self.ledger = ledger
        self.clock = clock
        self.addresses = addresses
        self.done = Scenario()
        self.wallets: dict[tuple[str, str], tuple[str, str]] = {}

    def customer(self, partner: str, code: str, activate_later: bool = False) -> None:
        status = None if activate_later else "ACTIVE"
        self.ledger.register_customer(partner, code, "Basic", status=status, currency="EUR")
        if activate_later:
            self.ledger.activate_customer(partner, code, "ACTIVE")
        address = self.addresses.next("BTC")
        account, _ = self.ledger.open_account(partner, code, address)
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
        return self.done.track(self.ledger.create_buy(partner, request, stage=stage))

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
        return self.done.track(self.ledger.create_sell(partner, request))

    def sendout(self, buy: Transaction, confirmations: int) -> None:
        report = SendoutReport(
            transaction_code=buy.code, tx_id=f"out-{buy.code}", confirmations=confirmations
        )
        self.ledger.report_sendout(buy.order.partner, report)

    def deposit(self, sell: Transaction, confirmations: int, amount: Decimal | None = None) -> None:
        report = DepositReport(
            crypto="BTC",
            address=sell.order.destination_address,
            tx_id=f"in-{sell.code}",
            crypto_amount=sell.order.quote.crypto_amount if amount is None else amount,
            confirmations=confirmations,
        )
        self.ledger.report_deposit(sell.order.partner, report)


def populate(ledger: Ledger, clock: Any, addresses: Any) -> Scenario:
    """Every status and event kind, for partners `demo` (with Payouts) and `other` (without)."""
    drive = Driver(ledger, clock, addresses)
    drive.customer("demo", "alice", activate_later=True)
    drive.customer("demo", "bob")
    drive.customer("other", "alice")

    completed = drive.buy("demo", "alice", "100", payment_reference="ref-1", data={"desk": "web"})
    ledger.commit("demo", completed.code)
    drive.sendout(completed, 1)
    drive.sendout(completed, 2)
    drive.buy("demo", "alice", "50", stage=False)
    failed = drive.buy("demo", "bob", "75")
    ledger.cancel_staged("demo", failed.code, "payment failed")

    paid = drive.sell("demo", "bob", "0.002")
    drive.deposit(paid, 1)
    drive.deposit(paid, 2)
    ledger.confirm_payout("demo", paid.code, "payout-1", "IBAN-1")
    ledger.pay_out("demo", paid.code)
    to_payout = drive.sell("demo", "alice", "0.001")
    drive.deposit(to_payout, 2)
    blocked = drive.sell("demo", "bob", "0.001")
    drive.deposit(blocked, 2, Decimal("0.0005"))
    completed_sell = drive.sell("other", "alice", "0.003")
    drive.deposit(completed_sell, 2)

    lapsing_buy = drive.buy("other", "alice", "20")
    lapsing_sell = drive.sell("demo", "alice", "0.0001")
    clock.advance(days=1)
    ledger.expire("other", lapsing_buy.code)
    ledger.expire("demo", lapsing_sell.code)
    drive.buy("demo", "alice", "30")
    drive.sell("other", "alice", "0.0005")
    drive.deposit(drive.sell("other", "alice", "0.0002"), 1)
    return drive.done
