"""Use cases of selling: simulate, and create (Initiated, with a deposit address of its own)."""

from __future__ import annotations

from datetime import datetime

from application.commands import SellRequest
from application.context import Context, new_transaction_code
from application.counterparties import active_customer, check_account, reads_of_a_create
from application.limits import Limits
from application.orders import OrderDesk
from application.store.aggregates import AggregateReads
from application.store.request_writes import RequestWrites
from domain.deposits import AddressPool, DepositAddress
from domain.limits import LimitWindow
from domain.transaction import Order, Transaction


class Sells:
    def __init__(self, context: Context, limits: Limits) -> None:
        self.context = context
        self.store = context.store
        self.limits = limits

    def simulate(self, partner: str, request: SellRequest) -> Order:
        """Prices a sell after every check its create would make (the same refusals); records nothing."""
        code = new_transaction_code()
        now = self.context.clock.now()
        with self.store.loading(*self._reads(partner, code, request, now)) as loaded:
            order, _ = self._checked(loaded, self.context.new_desk(), partner, code, request, now)
        return order

    def create(
        self,
        partner: str,
        request: SellRequest,
        code: str | None = None,
        *,
        unit: RequestWrites | None = None,
    ) -> Transaction:
        """A new sell, Initiated, with its own deposit address, saved within the request's `unit` of work.
        Idempotent per `code` like a buy's create."""
        code = code or new_transaction_code()
        for attempt in self.store.attempts():
            with attempt:
                now = self.context.clock.now()
                with self.store.loading(
                    *self._reads(partner, code, request, now), AddressPool.create_id(request.crypto)
                ) as loaded:
                    existing = loaded.find(Transaction.create_id(partner, code))
                    if existing is not None:
                        self.context.new_desk().check_same_request(existing.order, request)
                        return existing
                    # one desk for the whole create: its callback URL is checked once
                    desk = self.context.new_desk()
                    # every check refuses before an address is allocated
                    _, windows = self._checked(loaded, desk, partner, code, request, now)
                    transaction, address, pool = self._initiate(loaded, desk, partner, code, request, now)
                self.store.save(transaction, address, pool, *windows, unit=unit)
                return transaction

    def _initiate(
        self,
        loaded: AggregateReads,
        desk: OrderDesk,
        partner: str,
        code: str,
        request: SellRequest,
        at: datetime,
    ) -> tuple[Transaction, DepositAddress, AddressPool]:
        """The sell with the next deposit address of its crypto's pool (as the use case `loaded` it), the
        address's index, and the pool."""
        pool = loaded.address_pool(request.crypto)
        deposit = self.context.addresses.derive(request.crypto, pool.allocate(f"sell:{partner}:{code}"))
        order = desk.sell_order(partner, code, request, (deposit.address, deposit.path))
        transaction = Transaction.initiate_sell(order, at, desk.valid_until(order.payment_method, at))
        address = DepositAddress(
            crypto=order.crypto,
            address=deposit.address,
            path=deposit.path,
            partner=partner,
            transaction_code=code,
            at=at,
        )
        return transaction, address, pool

    def _checked(
        self,
        loaded: AggregateReads,
        desk: OrderDesk,
        partner: str,
        code: str,
        request: SellRequest,
        at: datetime,
    ) -> tuple[Order, list[LimitWindow]]:
        """Every check of a new sell, as a buy's, on what the use case `loaded`; the order has no deposit
        address yet (create derives one only once the request passed), and its limit amount is the final
        order's."""
        desk.check_sell(request)
        customer = active_customer(loaded, partner, request.customer_code)
        check_account(loaded, partner, loaded.account(partner, request.account_code), request)
        order = desk.sell_order(partner, code, request, None)
        return order, self.limits.reserve(loaded, customer, "sell", order, at)

    @staticmethod
    def _reads(partner: str, code: str, request: SellRequest, at: datetime) -> list:
        return reads_of_a_create(partner, code, request, request.account_code, "sell", at)
