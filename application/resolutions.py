"""Use cases of the operator's resolutions (contract-notes.md, "Resolving blocked sells and late payments"):
a BLOCKED sell's amount received accepted, priced again at the quoted price, or the money a BLOCKED sell or
a late payment received refunded, less the coin's network fee."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime
from decimal import Decimal

from application.commands import ResolutionRequest
from application.context import Context
from application.limits import Limits
from application.store.request_writes import RequestWrites
from domain.errors import CryptoAddressInvalid, ValidationFailed, quoted_text
from domain.limits import LimitWindow
from domain.pricing import quote_sell_of_crypto
from domain.transaction import Order, Resolution, Status, Transaction


class Resolutions:
    def __init__(self, context: Context, limits: Limits) -> None:
        self.context = context
        self.store = context.store
        self.limits = limits

    def resolve(
        self, partner: str, code: str, request: ResolutionRequest, *, unit: RequestWrites | None = None
    ) -> Transaction:
        """Applies the operator's resolution to the partner's transaction `code`, with its limit windows:
        an accepted amount takes the customer's limits again for its new value (the old reservation given
        back); a BLOCKED sell refunded gives its reservation back (a late payment's was given back when the
        sell lapsed)."""
        for attempt in self.store.attempts():
            with attempt:
                transaction = self.store.transaction(partner, code)
                now = self.context.clock.now()
                if request.resolution == Resolution.ACCEPT_RECEIVED:
                    windows = self._accept(transaction, request, now)
                else:
                    windows = self._refund(transaction, request, now)
                self.store.save(transaction, *windows, unit=unit)
                return transaction

    def _accept(
        self, transaction: Transaction, request: ResolutionRequest, at: datetime
    ) -> list[LimitWindow]:
        transaction.check_acceptable()  # before the request's own content: nothing to accept is 409
        if request.refund_address is not None:
            raise ValidationFailed("refundAddress is for a Refund only; leave it out to accept the amount")
        order = transaction.order
        payouts = self.context.settings.partners[order.partner].has_payouts
        windows: list[LimitWindow] = []

        def repriced(received: Decimal) -> Order:
            new_order = self._priced_again(order, received)
            customer = self.store.customer(order.partner, order.customer_code)
            windows.extend(self.limits.taken_again(transaction, customer, new_order))
            return new_order

        transaction.accept_received(repriced, payouts, request.reason, at)
        return windows

    def _priced_again(self, order: Order, received: Decimal) -> Order:
        """The sell's order for `received` at the price it quoted, with the payment method's fee rules."""
        desk = self.context.new_desk()
        terms = desk.terms(order.payment_method, order.crypto, order.currency)
        quote = quote_sell_of_crypto(terms, order.quote.price, received)
        limit_amount = desk.in_base_currency(quote.fiat_value, order.currency)
        return replace(order, quote=quote, limit_amount=limit_amount)

    def _refund(
        self, transaction: Transaction, request: ResolutionRequest, at: datetime
    ) -> list[LimitWindow]:
        order = transaction.order
        transaction.check_refundable()  # before the address: a transaction with nothing to refund is 409
        address = request.refund_address or self._withdraw_address(transaction)
        if not self.context.addresses.is_valid(order.crypto, address):
            raise CryptoAddressInvalid(
                f"refundAddress {quoted_text(address)} is not a valid {order.crypto} address"
            )
        network_fee = self.context.settings.cryptos[order.crypto].network_fee
        was_blocked = transaction.status == Status.BLOCKED
        transaction.refund(address, network_fee, request.reason, at)
        return self.limits.release(transaction) if was_blocked else []

    def _withdraw_address(self, transaction: Transaction) -> str:
        """The withdraw address of the sell's account, where a refund goes unless the operator names one."""
        order = transaction.order
        if order.account_code is None:
            raise ValidationFailed(
                f"sell {order.code} has no account to take a withdraw address from; give refundAddress"
            )
        return self.store.account(order.partner, order.account_code).customer_address
