"""The order desk: turns a buy or sell request into a priced `Order`. It first judges the request's own
content (`application.request_checks`: every problem at once), reads no aggregate and writes nothing, so
simulate and create share it. It also gives the price list of a fiat currency (`GET /prices/{currency}`)."""

from __future__ import annotations

from datetime import datetime, timedelta
from decimal import Decimal

from application.commands import BuyRequest, SellRequest
from application.ports import AddressBook, CallbackUrlCheck, PriceSource
from application.request_checks import Draft, RequestChecks
from application.settings import Settings
from domain.callback_urls import CallbackUrlRules
from domain.errors import CallbackUrlRefused, CryptoUnknown, CurrencyNotFound, IdempotencyKeyReused
from domain.money import multiply
from domain.pricing import (
    Price,
    Terms,
    quote_buy,
    quote_sell_for_payout,
    quote_sell_of_crypto,
)
from domain.transaction import Order, TransactionType


class OrderDesk:
    def __init__(
        self,
        settings: Settings,
        prices: PriceSource,
        callback_urls: CallbackUrlCheck | None = None,
        addresses: AddressBook | None = None,
    ) -> None:
        self.settings = settings
        self.prices = prices
        self.callback_urls = callback_urls or CallbackUrlRules(settings.callback_http_hosts)
        self.checks = RequestChecks(settings, self.callback_urls, addresses)

    def price_list(self, currency: str) -> dict[str, Price]:
        """Buy and sell prices of every crypto-currency in one fiat currency."""
        if currency not in self.settings.currencies:
            known = ", ".join(sorted(self.settings.currencies))
            raise CurrencyNotFound(f"no prices in {currency!r}; supported currencies: {known}")
        return {crypto: self.prices.price(crypto, currency) for crypto in self.settings.cryptos}

    def check_buy(self, request: BuyRequest) -> None:
        """Refuses a buy for every problem of its own content at once (before any check of what is
        recorded: the customer, the account, the limits)."""
        self.checks.refuse(Draft.of_buy(request))

    def check_sell(self, request: SellRequest) -> None:
        self.checks.refuse(Draft.of_sell(request))

    def callback_url(self, requested: str | None, payment_method: str) -> str | None:
        """Where the transaction's status changes go: its own URL (checked now, DNS included), else the
        payment method's; fixed in the order, so the callbacks outbox needs nothing but the events."""
        if requested is None:
            return self.settings.payment_methods[payment_method].callback_url
        return self.checks.accept_callback_url(requested).url

    def buy_order(self, partner: str, code: str, request: BuyRequest, account_code: str | None) -> Order:
        """The priced order of a buy whose content passed `check_buy`."""
        terms = self.terms(request.payment_method, request.crypto, request.currency)
        market = self.prices.price(request.crypto, request.currency).buy
        quote = quote_buy(terms, market, request.fiat_value, request.requested_price, request.fiat_value_name)
        return Order(
            partner=partner,
            code=code,
            type=TransactionType.BUY,
            customer_code=request.customer_code,
            account_code=account_code,
            crypto=request.crypto,
            currency=request.currency,
            payment_method=request.payment_method,
            destination_address=request.destination_address,
            quote=quote,
            limit_amount=self.in_base_currency(quote.fiat_value, request.currency),
            bank_account_number=request.bank_account_number,
            callback_url=self.callback_url(request.callback_url, request.payment_method),
            blockchain_message=request.blockchain_message,
            payment_reference=request.payment_reference,
            data=dict(request.data),
            customer_ip=request.customer_ip,
        )

    def sell_order(
        self, partner: str, code: str, request: SellRequest, deposit: tuple[str, str] | None
    ) -> Order:
        """The priced order of a sell whose content passed `check_sell`; `deposit` is the (address, path) the
        customer pays to, None for a simulation."""
        terms = self.terms(request.payment_method, request.crypto, request.currency)
        market = self.prices.price(request.crypto, request.currency).sell
        if request.fiat_value is not None:
            quote = quote_sell_for_payout(terms, market, request.fiat_value, request.requested_price)
        else:
            assert request.crypto_amount is not None  # the checks refused a sell with neither
            quote = quote_sell_of_crypto(terms, market, request.crypto_amount, request.requested_price)
        address, path = deposit if deposit else ("", None)
        return Order(
            partner=partner,
            code=code,
            type=TransactionType.SELL,
            customer_code=request.customer_code,
            account_code=request.account_code,
            crypto=request.crypto,
            currency=request.currency,
            payment_method=request.payment_method,
            destination_address=address,
            quote=quote,
            limit_amount=self.in_base_currency(quote.fiat_value, request.currency),
            callback_url=self.callback_url(request.callback_url, request.payment_method),
            payment_reference=request.payment_reference,
            data=dict(request.data),
            deposit_path=path,
            customer_ip=request.customer_ip,
        )

    def check_same_request(self, order: Order, request: BuyRequest | SellRequest) -> None:
        """A create under a code already recorded must be a retry of the request that recorded it: the key
        it came under was reused (after 24 hours, or after a failure released it) for another request."""
        if not self._same_request(order, request):
            raise IdempotencyKeyReused(
                f"transaction {order.code} was created under this Idempotency-Key with another request; "
                "use a new key for a new request"
            )

    def _same_request(self, order: Order, request: BuyRequest | SellRequest) -> bool:
        quote = order.quote
        common = (
            order.customer_code == request.customer_code
            and order.currency == request.currency
            and order.crypto == request.crypto
            and order.payment_method == request.payment_method
            and quote.requested_price == request.requested_price
            and order.payment_reference == request.payment_reference
            and order.data == dict(request.data)
            and order.customer_ip == request.customer_ip
            and self._same_callback_url(order, request.callback_url)
        )
        if isinstance(request, SellRequest):
            return (
                common
                and order.type == TransactionType.SELL
                and order.account_code == request.account_code
                and quote.requested_fiat == request.fiat_value
                and quote.requested_crypto == request.crypto_amount
            )
        return (
            common
            and order.type == TransactionType.BUY
            and request.account_code in (None, order.account_code)
            and order.destination_address == request.destination_address
            and quote.requested_fiat == request.fiat_value
            and order.bank_account_number == request.bank_account_number
            and order.blockchain_message == request.blockchain_message
        )

    def _same_callback_url(self, order: Order, requested: str | None) -> bool:
        if requested is None:
            method = self.settings.payment_methods.get(order.payment_method)
            return method is not None and order.callback_url == method.callback_url
        try:
            return order.callback_url == self.callback_urls.parse(requested).url
        except CallbackUrlRefused:
            return False

    def crypto(self, code: str) -> None:
        if code not in self.settings.cryptos:
            known = ", ".join(sorted(self.settings.cryptos))
            raise CryptoUnknown(f"cryptoCode {code!r} is not supported; supported: {known}")

    def terms(self, payment_method: str, crypto: str, currency: str) -> Terms:
        """The fees and wiggle room of a request whose content passed the checks."""
        method = self.settings.payment_methods[payment_method]
        return Terms(
            fiat=self.settings.fiat(currency),
            crypto=self.settings.crypto_asset(crypto),
            fee_rate=method.fee_rate,
            bank_fee=method.bank_fee,
            network_fee=self.settings.cryptos[crypto].network_fee,
            wiggle_up=method.wiggle_up(),
            wiggle_down=method.wiggle_down(),
        )

    def in_base_currency(self, amount: Decimal, currency: str) -> Decimal:
        rate = self.settings.currencies[currency].rate_to_base
        return self.settings.fiat(self.settings.base_currency).nearest(multiply(amount, rate))

    def valid_until(self, payment_method: str, at: datetime) -> datetime:
        minutes = self.settings.payment_methods[payment_method].validity_minutes
        return at + timedelta(minutes=minutes)
