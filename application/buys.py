"""Use cases of buying: simulate, create (Staged, or committed at once), commit."""

from __future__ import annotations

from datetime import datetime

from application.commands import BuyRequest
from application.context import Context, new_transaction_code
from application.counterparties import active_customer, check_account, reads_of_a_create
from application.limits import Limits
from application.orders import OrderDesk
from application.store.aggregates import AggregateReads
from application.store.request_writes import RequestWrites
from domain.account import Account, account_code_for
from domain.errors import AccountDoesNotFit, IdempotencyKeyReused, TransactionExpired
from domain.limits import LimitWindow
from domain.transaction import Order, Transaction


class Buys:
    def __init__(self, context: Context, limits: Limits) -> None:
        self.context = context
        self.store = context.store
        self.limits = limits

    def simulate(self, partner: str, request: BuyRequest) -> Order:
        """Prices a buy after every check its create would make (the same refusals); records nothing."""
        code = new_transaction_code()
        now = self.context.clock.now()
        with self.store.loading(*self._reads(partner, code, request, now)) as loaded:
            order, _ = self._checked(loaded, self.context.new_desk(), partner, code, request, now)
        return order

    def create(
        self,
        partner: str,
        request: BuyRequest,
        stage: bool,
        code: str | None = None,
        *,
        unit: RequestWrites | None = None,
    ) -> Transaction:
        """A new buy, Staged or (without `stage`) committed at once, saved within the request's `unit` of
        work. Given a `code` already recorded, returns that transaction if it was the same request: a retry
        never creates a second one."""
        code = code or new_transaction_code()
        for attempt in self.store.attempts():
            with attempt:
                now = self.context.clock.now()
                with self.store.loading(*self._reads(partner, code, request, now)) as loaded:
                    existing = loaded.find(Transaction.create_id(partner, code))
                    if existing is not None:
                        return self._retried(existing, request, stage)
                    desk = self.context.new_desk()
                    order, windows = self._checked(loaded, desk, partner, code, request, now)
                    valid_until = desk.valid_until(order.payment_method, now)
                    create_buy = Transaction.stage_buy if stage else Transaction.send_buy
                    transaction = create_buy(order, now, valid_until)
                self.store.save(transaction, *windows, unit=unit)
                return transaction

    def commit(self, partner: str, code: str, *, unit: RequestWrites | None = None) -> Transaction:
        """Commits a staged buy; one past its validUntil is cancelled instead (limits given back)."""
        for attempt in self.store.attempts():
            with attempt:
                transaction = self.store.transaction(partner, code)
                now = self.context.clock.now()
                try:
                    transaction.commit(now)
                except TransactionExpired:
                    transaction.expire(now)
                    self.store.save(transaction, *self.limits.release(transaction), unit=unit)
                    raise
                self.store.save(transaction, unit=unit)
                return transaction

    def _checked(
        self,
        loaded: AggregateReads,
        desk: OrderDesk,
        partner: str,
        code: str,
        request: BuyRequest,
        at: datetime,
    ) -> tuple[Order, list[LimitWindow]]:
        """Every check of a new buy, in the order create makes them, on what the use case `loaded`: the
        request's own content (every problem at once), an ACTIVE customer, the account, the price, and the
        trust-level limits. The priced order and the limit windows holding its reservation (unsaved): create
        saves them, simulate drops them."""
        desk.check_buy(request)
        customer = active_customer(loaded, partner, request.customer_code)
        account = self._account(loaded, partner, request)
        order = desk.buy_order(partner, code, request, account)
        return order, self.limits.reserve(loaded, customer, "buy", order, at)

    def _retried(self, existing: Transaction, request: BuyRequest, stage: bool) -> Transaction:
        """The buy a retry recorded before, if it is the same request: staged, or committed at once, too."""
        self.context.new_desk().check_same_request(existing.order, request)
        if existing.committed_at_creation == stage:
            raise IdempotencyKeyReused(
                f"transaction {existing.code} was created under this Idempotency-Key "
                f"{'without' if stage else 'with'} stage; use a new key for a new request"
            )
        return existing

    def _reads(self, partner: str, code: str, request: BuyRequest, at: datetime) -> list:
        return reads_of_a_create(partner, code, request, account_code(partner, request), "buy", at)

    def _account(self, loaded: AggregateReads, partner: str, request: BuyRequest) -> str:
        """The account of a buy: the one named, or the customer's account for the destination (the
        request's crypto-currency and destination address passed the content checks already)."""
        code = account_code(partner, request)
        account = loaded.find(Account.create_id(partner, code))
        if account is None and request.account_code is None:
            loaded.customer(partner, request.customer_code)
            raise AccountDoesNotFit(
                "accountCode is required: no account of this customer has destinationAddress "
                f"{request.destination_address} as its address; open one with "
                f"POST /customer/{request.customer_code}/accounts or give accountCode"
            )
        check_account(loaded, partner, account or loaded.account(partner, code), request)
        return code


def account_code(partner: str, request: BuyRequest) -> str:
    """The account a buy names, or the customer's account for its destination address."""
    return request.account_code or account_code_for(
        partner, request.customer_code, request.crypto, request.destination_address
    )
