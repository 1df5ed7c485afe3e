"""`Ledger`: the application the interface talks to, one method per use case.

It is eventsourcing's `Application` for the ledger's events (`LedgerLog`: its store and transcodings) and
the front of the use cases, each a plain module by feature, built here on one `LedgerStore`:

| use cases                                    | module                       |
|----------------------------------------------|------------------------------|
| customers, accounts                          | `application.customers`      |
| trust-level limits                           | `application.limits`         |
| buys: simulate, create, commit               | `application.buys`           |
| sells: simulate, create                      | `application.sells`          |
| chain reports, payouts, expiry of one        | `application.settlement`     |
| the alternative endpoints' flows             | `application.alternative`    |
| reserve adjustments                          | `application.reserves`       |
| a transaction's history, its state at a time | `application.history`        |

Each method below only hands over to its module. The expiry sweeper (`application.sweeper`) keeps its own
memory of open deadlines and calls `expire`.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from datetime import datetime
from decimal import Decimal
from typing import Any

from eventsourcing.domain import DomainEvent

from application.alternative import AlternativeFlows
from application.buys import Buys
from application.changes import TransactionChanges
from application.commands import (
    AdjustmentRequest,
    BuyRequest,
    DepositReport,
    LimitUsage,
    SellRequest,
    SendoutReport,
)
from application.context import Context
from application.customers import Customers
from application.history import History
from application.limits import Limits
from application.orders import OrderDesk
from application.ports import AddressBook, CallbackUrlCheck, Clock, PriceSource, SystemClock
from application.request_checks import Draft
from application.reserves import Reserves
from application.sells import Sells
from application.settings import Settings
from application.settlement import Settlement
from application.store.aggregates import LedgerStore
from application.store.log import LedgerLog
from domain.account import Account
from domain.customer import Customer
from domain.deposits import AddressPool
from domain.errors import CurrencyNotFound
from domain.pricing import Price
from domain.reserves import ReserveAdjustment
from domain.transaction import Order, Transaction


class Ledger(LedgerLog):
    # Aggregates whose history only grows are loaded from a snapshot plus the events since: every sell and
    # account opening allocates from its crypto's pool. (Limit windows need none: each loads from its latest
    # event, which carries its total; see domain/limits.py.)
    snapshotting_intervals = {AddressPool: 100}

    def __init__(
        self,
        settings: Settings,
        prices: PriceSource,
        addresses: AddressBook,
        clock: Clock | None = None,
        env: dict[str, str] | None = None,
        callback_urls: CallbackUrlCheck | None = None,
    ) -> None:
        super().__init__(env)
        self.settings = settings
        self.clock = clock or SystemClock()
        self.store = LedgerStore(self)
        context = Context(self.store, settings, prices, addresses, self.clock, callback_urls)
        self.context = context
        self.limits_of = Limits(context)
        changes = TransactionChanges(context, self.limits_of)
        self.customers = Customers(context)
        self.buys = Buys(context, self.limits_of)
        self.sells = Sells(context, self.limits_of)
        self.settlement = Settlement(context, changes)
        self.alternative = AlternativeFlows(context, self.buys, self.settlement, changes)
        self.reserves = Reserves(context)
        self.histories = History(self.store)

    @property
    def desk(self) -> OrderDesk:
        return self.context.desk

    # --- customers and accounts ----------------------------------------------------------------------------

    def register_customer(
        self,
        partner: str,
        code: str,
        trust_level: str,
        status: str | None = None,
        currency: str | None = None,
        portfolio: str | None = None,
    ) -> Customer:
        return self.customers.register_customer(partner, code, trust_level, status, currency, portfolio)

    def activate_customer(self, partner: str, code: str, status: str) -> Customer:
        return self.customers.activate_customer(partner, code, status)

    def open_account(
        self, partner: str, customer_code: str, customer_address: str, crypto: str | None = None
    ) -> tuple[Account, bool]:
        return self.customers.open_account(partner, customer_code, customer_address, crypto)

    def accounts_of(self, customer: Customer) -> list[Account]:
        return self.customers.accounts_of(customer)

    def customer(self, partner: str, code: str) -> Customer:
        return self.store.customer(partner, code)

    def account(self, partner: str, code: str) -> Account:
        return self.store.account(partner, code)

    def limits(self, partner: str, customer_code: str) -> list[LimitUsage]:
        return self.limits_of.usage(partner, customer_code)

    # --- buys and sells -------------------------------------------------------------------------------------

    def simulate_buy(self, partner: str, request: BuyRequest) -> Order:
        return self.buys.simulate(partner, request)

    def create_buy(
        self, partner: str, request: BuyRequest, stage: bool, code: str | None = None
    ) -> Transaction:
        return self.buys.create(partner, request, stage, code)

    def commit(self, partner: str, code: str) -> Transaction:
        return self.buys.commit(partner, code)

    def simulate_sell(self, partner: str, request: SellRequest) -> Order:
        return self.sells.simulate(partner, request)

    def create_sell(self, partner: str, request: SellRequest, code: str | None = None) -> Transaction:
        return self.sells.create(partner, request, code)

    def transaction(self, partner: str, code: str) -> Transaction:
        return self.store.transaction(partner, code)

    # --- settlement -----------------------------------------------------------------------------------------

    def report_deposit(self, partner: str, report: DepositReport) -> Transaction:
        return self.settlement.report_deposit(partner, report)

    def report_sendout(self, partner: str, report: SendoutReport) -> Transaction:
        return self.settlement.report_sendout(partner, report)

    def confirm_payout(
        self, partner: str, code: str, reference: str | None = None, bank_account: str | None = None
    ) -> Transaction:
        return self.settlement.confirm_payout(partner, code, reference, bank_account)

    def pay_out(
        self, partner: str, code: str, reference: str | None = None, bank_account: str | None = None
    ) -> Transaction:
        return self.settlement.pay_out(partner, code, reference, bank_account)

    def expire(self, partner: str, code: str) -> Transaction:
        return self.settlement.expire(partner, code)

    # --- the alternative endpoints -------------------------------------------------------------------------

    def account_buy_draft(self, fields: Mapping[str, Any], unread: Collection[str] = ()) -> Draft:
        return self.alternative.account_buy_draft(fields, unread)

    def account_sell_draft(
        self, partner: str, fields: Mapping[str, Any], unread: Collection[str] = ()
    ) -> Draft:
        return self.alternative.account_sell_draft(partner, fields, unread)

    def account_buy(
        self,
        partner: str,
        account_code: str,
        payment_method: str,
        amount: Decimal,
        currency: str | None,
        ip: str | None,
    ) -> BuyRequest:
        return self.alternative.account_buy(partner, account_code, payment_method, amount, currency, ip)

    def account_sell(
        self, partner: str, account_code: str, payment_method: str, crypto_amount: Decimal, ip: str | None
    ) -> SellRequest:
        return self.alternative.account_sell(partner, account_code, payment_method, crypto_amount, ip)

    def execute(self, partner: str, code: str, result_code: str) -> Transaction:
        return self.alternative.execute(partner, code, result_code)

    def cancel_staged(self, partner: str, code: str, reason: str) -> Transaction:
        return self.alternative.cancel_staged(partner, code, reason)

    def update_sell_status(self, partner: str, code: str, status_code: str) -> Transaction:
        return self.alternative.update_sell_status(partner, code, status_code)

    # --- reserves, histories, prices ------------------------------------------------------------------------

    def record_adjustment(
        self, partner: str, request: AdjustmentRequest, code: str | None = None
    ) -> ReserveAdjustment:
        return self.reserves.record_adjustment(partner, request, code)

    def adjustment(self, partner: str, code: str) -> ReserveAdjustment | None:
        return self.reserves.adjustment(partner, code)

    def history(self, partner: str, code: str, at: datetime | None = None) -> list[DomainEvent]:
        return self.histories.history(partner, code, at)

    def transaction_history(
        self, partner: str, code: str, at: datetime | None = None
    ) -> tuple[Transaction, list[DomainEvent]]:
        return self.histories.transaction_history(partner, code, at)

    def price_list(self, currency: str) -> dict[str, Price]:
        """Buy and sell prices of every crypto-currency in one fiat currency."""
        if currency not in self.settings.currencies:
            known = ", ".join(sorted(self.settings.currencies))
            raise CurrencyNotFound(f"no prices in {currency!r}; supported currencies: {known}")
        prices = self.context.prices
        return {crypto: prices.price(crypto, currency) for crypto in self.settings.cryptos}
