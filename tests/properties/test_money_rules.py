"""Property tests of the money rules: quotes add up to the cent, rounding goes the stated way, the
wiggle room is exact, and amounts that break a rule are refused with the rule's own error."""

from __future__ import annotations

from decimal import Decimal

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from domain.errors import (
    AmountNotPositive,
    AmountTooPrecise,
    AmountTooSmall,
    RequestedPriceOutsideWiggleRoom,
    ValidationFailed,
)
from domain.money import WIDE, Asset, add, multiply, normalized, subtract
from domain.pricing import (
    MAX_AMOUNT,
    Quote,
    Terms,
    check_amount,
    executed_price,
    quote_buy,
    quote_sell_for_payout,
    quote_sell_of_crypto,
)
from tests.strategies import (
    assets,
    crypto_amounts,
    fiat_amounts,
    prices,
    smallest_buy,
    smallest_sell,
    terms,
)

FAST = settings(max_examples=100, deadline=None)
ETH = Asset("ETH", 18)
EUR = Asset("EUR", 2)


def fees_total(quote: Quote) -> Decimal:
    return quote.fees.partner_fiat + quote.fees.bank_fiat + quote.fees.network_fiat


def assert_fields_exact(terms_: Terms, quote: Quote) -> None:
    fiat_fields = (
        quote.fiat_value,
        quote.crypto_value,
        quote.fees.partner_fiat,
        quote.fees.bank_fiat,
        quote.fees.network_fiat,
    )
    crypto_fields = (
        quote.crypto_amount,
        quote.fees.partner_crypto,
        quote.fees.bank_crypto,
        quote.fees.network_crypto,
    )
    assert all(terms_.fiat.is_exact(value) for value in fiat_fields), fiat_fields
    assert all(terms_.crypto.is_exact(value) for value in crypto_fields), crypto_fields


def crypto_fee_equivalents_match(terms_: Terms, quote: Quote) -> None:
    price = quote.price
    fees = quote.fees
    assert fees.network_fiat == terms_.fiat.nearest(multiply(terms_.network_fee, price))
    assert fees.network_crypto == terms_.network_fee
    assert fees.bank_fiat == terms_.bank_fee
    assert fees.partner_crypto == terms_.crypto.nearest(fees.partner_fiat / price)


# --- Asset rounding ---------------------------------------------------------------------------------


@st.composite
def any_decimals(draw: st.DrawFn) -> Decimal:
    """Decimals of either sign with up to 30 decimal places, exact or not at any asset's precision."""
    places = draw(st.integers(0, 30))
    units = draw(st.integers(-(10**36), 10**36))
    return Decimal(f"{units}E-{places}")


@FAST
@given(asset=assets(), amount=any_decimals())
def test_rounding_down_and_up_bracket_the_amount_within_one_quantum(asset: Asset, amount: Decimal) -> None:
    down, up = asset.down(amount), asset.up(amount)
    assert down <= amount <= up
    assert subtract(up, down) <= asset.quantum
    assert asset.is_exact(down)
    assert asset.is_exact(up)
    assert (up == down) == asset.is_exact(amount)


@FAST
@given(asset=assets(), amount=any_decimals())
def test_rounding_to_nearest_stays_within_half_a_quantum(asset: Asset, amount: Decimal) -> None:
    nearest = asset.nearest(amount)
    assert abs(subtract(nearest, amount)) <= asset.quantum / 2
    assert asset.is_exact(nearest)
    assert nearest in (asset.down(amount), asset.up(amount))


@FAST
@given(asset=assets(), data=st.data())
def test_an_exact_amount_is_left_alone_by_every_rounding(asset: Asset, data: st.DataObject) -> None:
    amount = data.draw(crypto_amounts(asset) if asset.places >= 8 else fiat_amounts(asset))
    assert asset.is_exact(amount)
    assert asset.down(amount) == asset.up(amount) == asset.nearest(amount) == amount


@FAST
@given(asset=assets(), data=st.data())
def test_half_a_quantum_rounds_away_from_zero(asset: Asset, data: st.DataObject) -> None:
    amount = data.draw(fiat_amounts(asset, highest=Decimal(1000)))
    half = asset.quantum / 2
    assert asset.nearest(add(amount, half)) == add(amount, asset.quantum)
    assert asset.nearest(-add(amount, half)) == -add(amount, asset.quantum)
    assert asset.nearest(subtract(add(amount, half), half.scaleb(-20))) == amount
    assert asset.nearest(WIDE.minus(subtract(add(amount, half), half.scaleb(-20)))) == -amount


def test_an_eighteen_decimal_amount_times_a_six_digit_price_keeps_every_digit() -> None:
    amount = Decimal("12345.123456789012345678")
    price = Decimal("987654.12345678")
    exact_units = 12345123456789012345678 * 98765412345678
    exact_product = Decimal(f"{exact_units}E-26")
    assert multiply(amount, price) == exact_product
    assert len(exact_product.as_tuple().digits) > 28  # more than the default decimal context holds
    quote = quote_sell_of_crypto(
        Terms(EUR, ETH, Decimal(0), Decimal(0), Decimal(0), Decimal(0), Decimal(0)),
        price,
        amount,
    )
    assert quote.crypto_value == EUR.down(exact_product)


def test_a_thirty_three_digit_eth_amount_is_accepted_and_kept_whole() -> None:
    amount = Decimal("999999999999999.999999999999999999")
    check_amount(ETH, amount, "cryptoAmount")
    assert ETH.is_exact(amount)
    assert ETH.down(amount) == ETH.up(amount) == amount
    assert EUR.down(amount) == Decimal("999999999999999.99")
    assert EUR.up(amount) == Decimal("1000000000000000.00")


def test_normalized_drops_trailing_zeros_but_keeps_integers_whole() -> None:
    assert str(normalized(Decimal("1.50000000"))) == "1.5"
    assert str(normalized(Decimal("100.00"))) == "100"
    assert str(normalized(Decimal("1E+2"))) == "100"


# --- Buy --------------------------------------------------------------------------------------------


@st.composite
def buys(draw: st.DrawFn) -> tuple[Terms, Decimal, Decimal]:
    """Terms, a price and a fiat value, mostly (not always) large enough to cover the fees."""
    chosen = draw(terms())
    price = draw(prices())
    lowest = draw(st.sampled_from((chosen.fiat.quantum, smallest_buy(chosen, price))))
    fiat_value = draw(fiat_amounts(chosen.fiat, lowest, max(lowest * 10, Decimal(10) ** 7)))
    return chosen, price, fiat_value


@FAST
@given(case=buys())
def test_a_buy_pays_exactly_the_crypto_value_plus_all_fees(
    case: tuple[Terms, Decimal, Decimal],
) -> None:
    terms_, price, fiat_value = case
    nominal = terms_.fiat.nearest(multiply(terms_.fee_rate, fiat_value))
    network_fiat = terms_.fiat.nearest(multiply(terms_.network_fee, price))
    rest = fiat_value - nominal - terms_.bank_fee - network_fiat
    try:
        quote = quote_buy(terms_, price, fiat_value)
    except AmountTooSmall:
        assert rest < multiply(price, terms_.crypto.quantum)  # not even one quantum is left to buy
        return
    assert quote.fiat_value == fiat_value
    assert quote.fiat_value == quote.crypto_value + fees_total(quote)
    assert quote.crypto_amount > 0
    assert quote.crypto_value == terms_.fiat.up(multiply(quote.crypto_amount, price))
    assert multiply(quote.crypto_amount, price) <= rest
    assert multiply(quote.crypto_amount + terms_.crypto.quantum, price) > rest  # no quantum left over
    assert quote.fees.partner_fiat >= nominal
    bound = nominal + terms_.fiat.quantum + multiply(price, terms_.crypto.quantum)
    assert quote.fees.partner_fiat < bound
    assert_fields_exact(terms_, quote)
    crypto_fee_equivalents_match(terms_, quote)
    assert quote.requested_fiat == fiat_value
    assert quote.requested_crypto is None


@FAST
@given(data=st.data(), terms_=terms(), price=prices())
def test_a_buy_large_enough_for_its_fees_is_never_too_small(
    data: st.DataObject, terms_: Terms, price: Decimal
) -> None:
    lowest = smallest_buy(terms_, price)
    fiat_value = data.draw(fiat_amounts(terms_.fiat, lowest, lowest * 100))
    assert quote_buy(terms_, price, fiat_value).crypto_amount >= terms_.crypto.quantum


def test_a_buy_that_does_not_cover_the_fees_is_too_small() -> None:
    terms_ = Terms(EUR, Asset("BTC", 8), Decimal("0.01"), Decimal("2.00"), Decimal(0), *[Decimal(0)] * 2)
    with pytest.raises(AmountTooSmall):
        quote_buy(terms_, Decimal("50000"), Decimal("2.02"))
    assert quote_buy(terms_, Decimal("50000"), Decimal("2.03")).crypto_amount == Decimal("0.00000020")


# --- Sell for a payout ------------------------------------------------------------------------------


@FAST
@given(terms_=terms(), price=prices(), data=st.data())
def test_a_sell_for_a_payout_sells_crypto_worth_exactly_the_payout_plus_all_fees(
    terms_: Terms, price: Decimal, data: st.DataObject
) -> None:
    payout = data.draw(fiat_amounts(terms_.fiat))
    quote = quote_sell_for_payout(terms_, price, payout)
    nominal = terms_.fiat.up(multiply(terms_.fee_rate, payout))
    needed = payout + nominal + terms_.bank_fee + quote.fees.network_fiat
    assert quote.fiat_value == payout
    assert quote.requested_fiat == payout
    assert quote.crypto_value == quote.fiat_value + fees_total(quote)
    assert quote.crypto_value == terms_.fiat.down(multiply(quote.crypto_amount, price))
    assert quote.crypto_amount > 0
    assert multiply(quote.crypto_amount, price) >= needed
    assert multiply(quote.crypto_amount - terms_.crypto.quantum, price) < needed  # the least crypto
    assert quote.fees.partner_fiat >= nominal
    bound = nominal + terms_.fiat.quantum + multiply(price, terms_.crypto.quantum)
    assert quote.fees.partner_fiat < bound
    assert_fields_exact(terms_, quote)
    crypto_fee_equivalents_match(terms_, quote)


@FAST
@given(terms_=terms(), price=prices(), data=st.data())
def test_selling_the_crypto_quoted_for_a_payout_pays_out_at_least_that_payout(
    terms_: Terms, price: Decimal, data: st.DataObject
) -> None:
    payout = data.draw(fiat_amounts(terms_.fiat))
    by_payout = quote_sell_for_payout(terms_, price, payout)
    by_crypto = quote_sell_of_crypto(terms_, price, by_payout.crypto_amount)
    assert by_crypto.crypto_value == by_payout.crypto_value
    assert by_crypto.fiat_value >= payout


# --- Sell of a crypto amount ------------------------------------------------------------------------


@st.composite
def sells_of_crypto(draw: st.DrawFn) -> tuple[Terms, Decimal, Decimal]:
    chosen = draw(terms())
    price = draw(prices())
    lowest = draw(st.sampled_from((chosen.crypto.quantum, smallest_sell(chosen, price))))
    amount = draw(crypto_amounts(chosen.crypto, lowest, max(lowest * 10, Decimal(10) ** 3)))
    return chosen, price, amount


@FAST
@given(case=sells_of_crypto())
def test_a_sell_of_crypto_pays_out_the_largest_amount_its_value_covers(
    case: tuple[Terms, Decimal, Decimal],
) -> None:
    terms_, price, amount = case
    crypto_value = terms_.fiat.down(multiply(amount, price))
    network_fiat = terms_.fiat.nearest(multiply(terms_.network_fee, price))
    available = crypto_value - terms_.bank_fee - network_fiat
    one_plus_rate = 1 + terms_.fee_rate
    try:
        quote = quote_sell_of_crypto(terms_, price, amount)
    except AmountTooSmall:
        assert multiply(terms_.fiat.quantum, one_plus_rate) > available  # not one minor unit left
        return
    payout = quote.fiat_value
    assert quote.crypto_amount == amount
    assert quote.requested_crypto == amount
    assert quote.requested_fiat is None
    assert quote.crypto_value == crypto_value
    assert quote.crypto_value == payout + fees_total(quote)
    assert payout >= terms_.fiat.quantum
    assert multiply(payout, one_plus_rate) <= available
    assert multiply(payout + terms_.fiat.quantum, one_plus_rate) > available  # the largest payout
    rate_of_payout = terms_.fiat.up(multiply(terms_.fee_rate, payout))  # the rate, rounded up to the cent
    assert rate_of_payout <= quote.fees.partner_fiat <= rate_of_payout + terms_.fiat.quantum
    assert_fields_exact(terms_, quote)
    crypto_fee_equivalents_match(terms_, quote)


def test_the_cent_a_sell_of_crypto_cannot_pay_out_goes_to_the_partner_fee() -> None:
    """0.0100067 BTC at 59000 is worth 590.39 EUR; less 0.50 bank and 1.18 network fee, 588.71 is left for the
    payout and the partner fee of 1.5 %. A payout of 580.01 would need a partner fee of 8.71 (8.70015 rounded
    up), one cent too many; so the payout is 580.00 and the partner fee 8.71: the rate of the payout (8.70)
    and the cent left over, as README.md ("How amounts are computed") says."""
    btc = Asset("BTC", 8)
    fees_and_wiggle = (Decimal("0.015"), Decimal("0.50"), Decimal("0.00002"), Decimal("0.05"), Decimal("0.1"))
    sell = Terms(EUR, btc, *fees_and_wiggle)
    quote = quote_sell_of_crypto(sell, Decimal("59000"), Decimal("0.01000670"))
    assert quote.crypto_value == Decimal("590.39")
    assert quote.fiat_value == Decimal("580.00")
    assert (quote.fees.bank_fiat, quote.fees.network_fiat) == (Decimal("0.50"), Decimal("1.18"))
    assert quote.fees.partner_fiat == Decimal("8.71")
    assert quote_sell_of_crypto(sell, Decimal("59000"), Decimal("0.00250000")).fees.partner_fiat == Decimal(
        "2.16"
    )  # 143.66 paid out: 1.5 % of it is 2.1549, rounded up, and nothing left over


@FAST
@given(data=st.data(), terms_=terms(), price=prices())
def test_a_sell_of_crypto_large_enough_for_its_fees_is_never_too_small(
    data: st.DataObject, terms_: Terms, price: Decimal
) -> None:
    lowest = smallest_sell(terms_, price)
    amount = data.draw(crypto_amounts(terms_.crypto, lowest, lowest * 100))
    assert quote_sell_of_crypto(terms_, price, amount).fiat_value >= terms_.fiat.quantum


# --- Wiggle room ------------------------------------------------------------------------------------


@FAST
@given(terms_=terms(), market=prices(), position=st.fractions(0, 1))
def test_a_requested_price_within_the_wiggle_room_is_the_executed_price(
    terms_: Terms, market: Decimal, position: object
) -> None:
    lowest = multiply(market, 1 - terms_.wiggle_down)
    highest = multiply(market, 1 + terms_.wiggle_up)
    assert executed_price(terms_, market, lowest) == lowest
    assert executed_price(terms_, market, highest) == highest
    assert executed_price(terms_, market, market) == market
    between = lowest + (highest - lowest) * Decimal(position.numerator) / Decimal(position.denominator)
    assume(lowest <= between <= highest)
    assert executed_price(terms_, market, between) == between
    assert executed_price(terms_, market, None) == market


@FAST
@given(terms_=terms(), market=prices(), step=st.integers(-40, 6))
def test_a_requested_price_just_outside_the_wiggle_room_is_refused(
    terms_: Terms, market: Decimal, step: int
) -> None:
    epsilon = Decimal(1).scaleb(step)
    lowest = multiply(market, 1 - terms_.wiggle_down)
    highest = multiply(market, 1 + terms_.wiggle_up)
    with pytest.raises(RequestedPriceOutsideWiggleRoom):
        executed_price(terms_, market, add(highest, epsilon))
    below = subtract(lowest, epsilon)
    if below > 0:
        with pytest.raises(RequestedPriceOutsideWiggleRoom):
            executed_price(terms_, market, below)


@FAST
@given(terms_=terms(), market=prices(), data=st.data())
def test_every_quote_uses_the_requested_price_or_refuses_it(
    terms_: Terms, market: Decimal, data: st.DataObject
) -> None:
    requested = data.draw(prices())
    lowest = multiply(market, 1 - terms_.wiggle_down)
    highest = multiply(market, 1 + terms_.wiggle_up)
    fiat_value = smallest_buy(terms_, max(requested, market)) + terms_.fiat.quantum
    if lowest <= requested <= highest:
        quote = quote_buy(terms_, market, fiat_value, requested)
        assert quote.price == requested
        assert quote.requested_price == requested
        assert quote_sell_for_payout(terms_, market, fiat_value, requested).price == requested
    else:
        for quote_ in (quote_buy, quote_sell_for_payout):
            with pytest.raises(RequestedPriceOutsideWiggleRoom):
                quote_(terms_, market, fiat_value, requested)


@pytest.mark.parametrize("requested", [Decimal(0), Decimal(-1), Decimal("NaN"), Decimal("Infinity")])
def test_a_requested_price_that_is_not_positive_is_refused(requested: Decimal) -> None:
    terms_ = Terms(EUR, ETH, Decimal(0), Decimal(0), Decimal(0), Decimal("0.1"), Decimal("0.1"))
    with pytest.raises(AmountNotPositive):
        executed_price(terms_, Decimal(100), requested)


# --- Amount checks ----------------------------------------------------------------------------------


QUOTES = {
    "buy": (quote_buy, "fiat"),
    "sell for payout": (quote_sell_for_payout, "fiat"),
    "sell of crypto": (quote_sell_of_crypto, "crypto"),
}


@FAST
@given(kind=st.sampled_from(sorted(QUOTES)), terms_=terms(), price=prices(), data=st.data())
def test_an_amount_with_more_decimals_than_its_asset_is_too_precise(
    kind: str, terms_: Terms, price: Decimal, data: st.DataObject
) -> None:
    quote_, side = QUOTES[kind]
    asset = terms_.fiat if side == "fiat" else terms_.crypto
    amount = data.draw(fiat_amounts(asset, highest=Decimal(10) ** 6))
    extra = data.draw(st.integers(1, 9)) * asset.quantum / data.draw(st.sampled_from((10, 1000)))
    with pytest.raises(AmountTooPrecise):
        quote_(terms_, price, amount + extra)


@FAST
@given(kind=st.sampled_from(sorted(QUOTES)), terms_=terms(), price=prices(), data=st.data())
def test_a_zero_or_negative_amount_is_not_positive(
    kind: str, terms_: Terms, price: Decimal, data: st.DataObject
) -> None:
    quote_, side = QUOTES[kind]
    asset = terms_.fiat if side == "fiat" else terms_.crypto
    amount = data.draw(st.just(Decimal(0)) | fiat_amounts(asset).map(lambda a: -a))
    with pytest.raises(AmountNotPositive):
        quote_(terms_, price, amount)


@pytest.mark.parametrize("kind", sorted(QUOTES))
def test_an_amount_of_ten_to_the_fifteen_is_refused_but_one_unit_less_is_not(kind: str) -> None:
    quote_, _ = QUOTES[kind]
    terms_ = Terms(EUR, ETH, Decimal("0.01"), Decimal(1), Decimal(0), Decimal(0), Decimal(0))
    with pytest.raises(ValidationFailed):
        quote_(terms_, Decimal(1000), MAX_AMOUNT)
    quote_(terms_, Decimal(1000), MAX_AMOUNT - 1)


@pytest.mark.parametrize("amount", [Decimal("NaN"), Decimal("Infinity"), Decimal("-Infinity"), Decimal("-0")])
def test_an_amount_that_is_not_a_finite_positive_number_is_not_positive(amount: Decimal) -> None:
    with pytest.raises(AmountNotPositive):
        check_amount(EUR, amount, "fiatValue")
