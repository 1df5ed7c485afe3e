"""Prices and quotes: fees, wiggle room, and the arithmetic of buys and sells."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

from domain.errors import (
    AmountNotPositive,
    AmountTooPrecise,
    AmountTooSmall,
    RequestedPriceOutsideWiggleRoom,
    ValidationFailed,
)
from domain.money import Asset, add, divide, multiply, normalized, quoted, subtract


@dataclass(frozen=True)
class Price:
    """What one unit of a crypto-currency costs in a fiat currency: the buy and the sell side."""

    buy: Decimal
    sell: Decimal
    updated: datetime


@dataclass(frozen=True)
class Terms:
    """What a payment method and a crypto-currency set for one quote: assets, fees and wiggle room."""

    fiat: Asset
    crypto: Asset
    fee_rate: Decimal  # partner fee as a fraction of the fiat value
    bank_fee: Decimal  # fixed fiat amount
    network_fee: Decimal  # fixed crypto amount
    wiggle_up: Decimal  # how far above the current price a requested price may be, as a fraction
    wiggle_down: Decimal


@dataclass(frozen=True)
class Fees:
    partner_fiat: Decimal
    partner_crypto: Decimal
    bank_fiat: Decimal
    bank_crypto: Decimal
    network_fiat: Decimal
    network_crypto: Decimal

    @property
    def total_fiat(self) -> Decimal:
        return add(self.partner_fiat, self.bank_fiat, self.network_fiat)


@dataclass(frozen=True)
class Quote:
    """The priced amounts of a buy or a sell.

    Buy: `fiat_value` is what the customer pays, and equals `crypto_value` plus all fees exactly.
    Sell: `fiat_value` is the payout, and `crypto_value` equals it plus all fees exactly.
    `crypto_value` is the fiat value of `crypto_amount` at `price`, rounded (up for a buy, down for a sell);
    the rounding remainder is part of the partner fee.
    """

    requested_fiat: Decimal | None
    requested_crypto: Decimal | None
    requested_price: Decimal | None
    price: Decimal
    crypto_amount: Decimal
    fiat_value: Decimal
    crypto_value: Decimal
    fees: Fees


MAX_AMOUNT = Decimal("1e15")


def check_amount(asset: Asset, amount: Decimal, name: str) -> None:
    """An amount must be positive, below 10^15, and exact at the asset's precision (checked in this order,
    so that no rounding ever sees a huge amount; a refusal quotes the amount `quoted`, short)."""
    if not amount.is_finite() or amount <= 0:
        raise AmountNotPositive(f"{name} must be greater than zero, got {quoted(amount)}")
    if amount >= MAX_AMOUNT:
        raise ValidationFailed(f"{name} must be below {MAX_AMOUNT:f}, got {quoted(amount)}")
    if not asset.is_exact(amount):
        raise AmountTooPrecise(
            f"{name} {quoted(amount)} has more than {asset.places} decimal places allowed for {asset.code}"
        )


def executed_price(terms: Terms, market: Decimal, requested: Decimal | None) -> Decimal:
    """The requested price when it lies within the wiggle room around the market price, else refused."""
    if requested is None:
        return market
    if not requested.is_finite() or requested <= 0:
        raise AmountNotPositive(f"requestedPrice must be greater than zero, got {quoted(requested)}")
    lowest = multiply(market, subtract(Decimal(1), terms.wiggle_down))
    highest = multiply(market, add(Decimal(1), terms.wiggle_up))
    if not lowest <= requested <= highest:
        raise RequestedPriceOutsideWiggleRoom(
            f"requestedPrice {quoted(requested)} is outside the wiggle room {normalized(lowest)} to "
            f"{normalized(highest)} around the current price {market} {terms.fiat.code}"
        )
    return requested


def _fees(terms: Terms, price: Decimal, partner_fiat: Decimal) -> Fees:
    """Fiat fees with their crypto equivalents at `price` (the crypto side is for display)."""
    network_fiat = terms.fiat.nearest(multiply(terms.network_fee, price))
    return Fees(
        partner_fiat=partner_fiat,
        partner_crypto=terms.crypto.nearest(divide(partner_fiat, price)),
        bank_fiat=terms.bank_fee,
        bank_crypto=terms.crypto.nearest(divide(terms.bank_fee, price)),
        network_fiat=network_fiat,
        network_crypto=terms.network_fee,
    )


def _too_small(what: str, amount: Decimal, terms: Terms) -> AmountTooSmall:
    return AmountTooSmall(
        f"{what} {quoted(amount)} {terms.fiat.code} does not cover the fees of this payment method"
    )


def quote_buy(
    terms: Terms,
    market: Decimal,
    fiat_value: Decimal,
    requested_price: Decimal | None = None,
    name: str = "fiatValue",
) -> Quote:
    """A buy for `fiat_value` paid by the customer: fees first, the rest buys crypto, rounded down.
    `name` is what the client called the amount, for the messages of refusals."""
    check_amount(terms.fiat, fiat_value, name)
    price = executed_price(terms, market, requested_price)
    nominal = _fees(terms, price, terms.fiat.nearest(multiply(terms.fee_rate, fiat_value)))
    rest = subtract(fiat_value, nominal.total_fiat)
    crypto_amount = terms.crypto.down(divide(rest, price)) if rest > 0 else Decimal(0)
    if crypto_amount <= 0:
        raise _too_small(name, fiat_value, terms)
    crypto_value = terms.fiat.up(multiply(crypto_amount, price))
    partner_fiat = add(nominal.partner_fiat, subtract(rest, crypto_value))
    return Quote(
        requested_fiat=fiat_value,
        requested_crypto=None,
        requested_price=requested_price,
        price=price,
        crypto_amount=crypto_amount,
        fiat_value=fiat_value,
        crypto_value=crypto_value,
        fees=_fees(terms, price, partner_fiat),
    )


def quote_sell_for_payout(
    terms: Terms, market: Decimal, payout: Decimal, requested_price: Decimal | None = None
) -> Quote:
    """A sell that pays out `payout`: the crypto to sell covers payout and fees, rounded up."""
    check_amount(terms.fiat, payout, "fiatValue")
    price = executed_price(terms, market, requested_price)
    # The partner fee rounds up here, so that selling the quoted crypto by cryptoAmount pays out at
    # least `payout` again: both ways, the partner fee is at least fee_rate x payout.
    nominal = _fees(terms, price, terms.fiat.up(multiply(terms.fee_rate, payout)))
    needed = add(payout, nominal.total_fiat)
    crypto_amount = terms.crypto.up(divide(needed, price))
    crypto_value = terms.fiat.down(multiply(crypto_amount, price))
    partner_fiat = add(nominal.partner_fiat, subtract(crypto_value, needed))
    return Quote(
        requested_fiat=payout,
        requested_crypto=None,
        requested_price=requested_price,
        price=price,
        crypto_amount=crypto_amount,
        fiat_value=payout,
        crypto_value=crypto_value,
        fees=_fees(terms, price, partner_fiat),
    )


def quote_sell_of_crypto(
    terms: Terms, market: Decimal, crypto_amount: Decimal, requested_price: Decimal | None = None
) -> Quote:
    """A sell of `crypto_amount`: its fiat value (rounded down) less the fixed fees is split into the payout
    and the partner fee. The partner fee is never less than `fee_rate` times the payout, and the payout is
    the largest amount, in whole minor units, for which that holds; so the partner fee is the rate of the
    payout rounded up to the minor unit, plus at most one minor unit that no larger payout could take."""
    check_amount(terms.crypto, crypto_amount, "cryptoAmount")
    price = executed_price(terms, market, requested_price)
    crypto_value = terms.fiat.down(multiply(crypto_amount, price))
    fixed = _fees(terms, price, Decimal(0))
    before_partner = subtract(crypto_value, fixed.total_fiat)
    payout = terms.fiat.down(divide(before_partner, add(Decimal(1), terms.fee_rate)))
    if payout <= 0:
        raise _too_small("the value of cryptoAmount,", crypto_value, terms)
    return Quote(
        requested_fiat=None,
        requested_crypto=crypto_amount,
        requested_price=requested_price,
        price=price,
        crypto_amount=crypto_amount,
        fiat_value=payout,
        crypto_value=crypto_value,
        fees=_fees(terms, price, subtract(before_partner, payout)),
    )
