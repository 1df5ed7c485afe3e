"""Use cases of buying and selling: simulate, create, commit."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from uuid import UUID

from application.base import LedgerBase
from application.commands import BuyRequest, SellRequest
from application.orders import OrderDesk
from domain.account import Account, account_code_for
from domain.customer import Customer
from domain.deposits import AddressPool, DepositAddress
from domain.errors import (
    AccountNotOfCustomer,
    CryptoAddressInvalid,
    CustomerNotActive,
    TransactionExpired,
    ValidationFailed,
)
from domain.limits import PERIODS, LimitWindow, period_key
from domain.transaction import Order, Status, Transaction


class Trading(LedgerBase):
    @property
    def desk(self) -> OrderDesk:
        return OrderDesk(self.settings, self.prices)

    def simulate_buy(self, partner: str, request: BuyRequest) -> Order:
        """Prices a buy after every check its create would make (the same refusals); records nothing."""
        code = self.new_transaction_code()
        now = self.clock.now()
        account_code = self._buy_account_code(partner, request)
        with self.loading(*self._reads_of_a_create(partner, code, request, account_code, "buy", now)):
            order, _ = self._checked_buy(partner, code, request, now)
        return order

    def _checked_buy(
        self, partner: str, code: str, request: BuyRequest, at: datetime
    ) -> tuple[Order, list[LimitWindow]]:
        """Every check of a new buy, in the order create makes them: an ACTIVE customer, the account and
        destination, the request's references and price, and the trust-level limits. The priced order and
        the limit windows holding its reservation (unsaved): create saves them, simulate drops them."""
        customer = self._active_customer(partner, request.customer_code)
        account = self._buy_account(partner, request)
        order = self.desk.buy_order(partner, code, request, account)
        return order, self._reserve_limits(customer, "buy", order, at)

    def create_buy(
        self, partner: str, request: BuyRequest, stage: bool, code: str | None = None
    ) -> Transaction:
        """A new buy, Staged or (without `stage`) committed at once. Given a `code` already recorded,
        returns that transaction: a retried request never creates a second one."""
        code = code or self.new_transaction_code()

        def create() -> Transaction:
            now = self.clock.now()
            account_code = self._buy_account_code(partner, request)
            with self.loading(*self._reads_of_a_create(partner, code, request, account_code, "buy", now)):
                existing = self.find(Transaction.create_id(partner, code))
                if existing is not None:
                    self.desk.check_same_request(existing.order, request)
                    return existing
                order, windows = self._checked_buy(partner, code, request, now)
                valid_until = self.desk.valid_until(order.payment_method, now)
                create_buy = Transaction.stage_buy if stage else Transaction.send_buy
                transaction = create_buy(order, now, valid_until)
            self.save(transaction, *windows)
            return transaction

        return self.retrying(create)

    @staticmethod
    def _reads_of_a_create(
        partner: str,
        code: str,
        request: BuyRequest | SellRequest,
        account_code: str,
        direction: str,
        at: datetime,
    ) -> list[UUID]:
        """What creating a buy or a sell reads (and a sell its crypto's address pool): the transaction (if a
        retry made it), the customer, the account and the limit windows."""
        return [
            Transaction.create_id(partner, code),
            Customer.create_id(partner, request.customer_code),
            Account.create_id(partner, account_code),
            *(
                LimitWindow.create_id(partner, request.customer_code, direction, period_key(period, at))
                for period in PERIODS
            ),
        ]

    def commit(self, partner: str, code: str) -> Transaction:
        def commit_() -> Transaction:
            transaction = self.transaction(partner, code)
            now = self.clock.now()
            try:
                transaction.commit(now)
            except TransactionExpired:
                transaction.expire(now)
                self.save(transaction, *self._release_limits(transaction))
                raise
            self.save(transaction)
            return transaction

        return self.retrying(commit_)

    def simulate_sell(self, partner: str, request: SellRequest) -> Order:
        """Prices a sell after every check its create would make (the same refusals); records nothing."""
        code = self.new_transaction_code()
        now = self.clock.now()
        reads = self._reads_of_a_create(partner, code, request, request.account_code, "sell", now)
        with self.loading(*reads):
            order, _ = self._checked_sell(partner, code, request, now)
        return order

    def _checked_sell(
        self, partner: str, code: str, request: SellRequest, at: datetime
    ) -> tuple[Order, list[LimitWindow]]:
        """Every check of a new sell, as `_checked_buy`; the order has no deposit address yet (create
        derives one only once the request passed), and its limit amount is the final order's."""
        customer = self._active_customer(partner, request.customer_code)
        self._sell_account(partner, request)
        order = self.desk.sell_order(partner, code, request, None)
        return order, self._reserve_limits(customer, "sell", order, at)

    def create_sell(self, partner: str, request: SellRequest, code: str | None = None) -> Transaction:
        """A new sell, Initiated, with its own deposit address. Idempotent per `code` like `create_buy`."""
        code = code or self.new_transaction_code()

        def create() -> Transaction:
            now = self.clock.now()
            reads = self._reads_of_a_create(partner, code, request, request.account_code, "sell", now)
            with self.loading(*reads, AddressPool.create_id(request.crypto)):
                existing = self.find(Transaction.create_id(partner, code))
                if existing is not None:
                    self.desk.check_same_request(existing.order, request)
                    return existing
                _, windows = self._checked_sell(partner, code, request, now)  # refuses before allocating
                pool = self.address_pool(request.crypto)
                deposit = self.addresses.derive(request.crypto, pool.allocate(f"sell:{partner}:{code}"))
                order = self.desk.sell_order(partner, code, request, (deposit.address, deposit.path))
                transaction = Transaction.initiate_sell(
                    order, now, self.desk.valid_until(order.payment_method, now)
                )
                address = DepositAddress(
                    crypto=order.crypto,
                    address=deposit.address,
                    path=deposit.path,
                    partner=partner,
                    transaction_code=code,
                    at=now,
                )
            self.save(transaction, address, pool, *windows)
            return transaction

        return self.retrying(create)

    def change_transaction(
        self,
        partner: str,
        code: str,
        command: Callable[[Transaction, datetime], None],
        release_limits: bool = False,
    ) -> Transaction:
        """Loads a transaction, applies one command at the clock's time and saves it (with its limit
        windows given back when the command cancels it, as a late payment cancels an expired sell),
        rerun on a version conflict."""

        def change() -> Transaction:
            transaction = self.transaction(partner, code)
            was_cancelled = transaction.status == Status.CANCELLED
            command(transaction, self.clock.now())
            cancelled_now = transaction.status == Status.CANCELLED and not was_cancelled
            windows = self._release_limits(transaction) if release_limits or cancelled_now else []
            self.save(transaction, *windows)
            return transaction

        return self.retrying(change)

    def _active_customer(self, partner: str, code: str) -> Customer:
        customer = self.customer(partner, code)
        if not customer.is_active:
            raise CustomerNotActive(
                f"customer {code} is {customer.status}; activate it with PUT /customer/{code} first"
            )
        return customer

    def _buy_account(self, partner: str, request: BuyRequest) -> str:
        """The account of a buy: the one named, or the customer's account for the destination."""
        self.desk.crypto(request.crypto)
        if not self.addresses.is_valid(request.crypto, request.destination_address):
            raise CryptoAddressInvalid(
                f"destinationAddress {request.destination_address!r} is not a valid {request.crypto} address"
            )
        code = self._buy_account_code(partner, request)
        account = self.find(Account.create_id(partner, code))
        if account is None and request.account_code is None:
            self.customer(partner, request.customer_code)
            raise ValidationFailed(
                "accountCode is required: no account of this customer has destinationAddress "
                f"{request.destination_address} as its address; open one with "
                f"POST /customer/{request.customer_code}/accounts or give accountCode"
            )
        self._check_account(partner, account or self.account(partner, code), request)
        return code

    @staticmethod
    def _buy_account_code(partner: str, request: BuyRequest) -> str:
        """The account named, or the customer's account for the destination address."""
        return request.account_code or account_code_for(
            partner, request.customer_code, request.crypto, request.destination_address
        )

    def _sell_account(self, partner: str, request: SellRequest) -> Account:
        self.desk.crypto(request.crypto)
        account = self.account(partner, request.account_code)
        self._check_account(partner, account, request)
        return account

    def _check_account(self, partner: str, account: Account, request: BuyRequest | SellRequest) -> None:
        self.customer(partner, request.customer_code)
        if account.customer_code != request.customer_code:
            raise AccountNotOfCustomer(
                f"account {account.code} belongs to another customer than {request.customer_code}"
            )
        if account.crypto != request.crypto:
            raise ValidationFailed(
                f"account {account.code} holds {account.crypto}, but cryptoCode is {request.crypto}"
            )

    def _reserve_limits(
        self, customer: Customer, direction: str, order: Order, at: datetime
    ) -> list[LimitWindow]:
        level = self.settings.trust_levels[customer.trust_level]
        windows = []
        for period in PERIODS:
            window = self._window(customer.partner, customer.code, direction, period, at)
            window.reserve(
                order.code,
                order.limit_amount,
                level.limit(direction, period),
                self.settings.base_currency,
            )
            windows.append(window)
        return windows

    def _release_limits(self, transaction: Transaction) -> list[LimitWindow]:
        order = transaction.order
        direction = "buy" if order.type == "BROKERBUY" else "sell"
        windows = []
        for period in PERIODS:
            window = self._window(order.partner, order.customer_code, direction, period, transaction.created)
            window.release(order.code)
            windows.append(window)
        return windows

    def _window(
        self, partner: str, customer_code: str, direction: str, period: str, at: datetime
    ) -> LimitWindow:
        key = period_key(period, at)
        return self.get_or_create(
            LimitWindow.create_id(partner, customer_code, direction, key),
            lambda: LimitWindow(partner, customer_code, direction, period, key),
        )
