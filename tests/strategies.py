"""Hypothesis strategies for the money rules: assets, prices, terms, amounts, quotes and orders.

Every amount a strategy returns is exact at its asset's precision, as the service would accept it. The
order strategies price their quotes with the real rules of `domain.pricing`, choosing amounts large enough
to cover the fees, so a state machine always starts from a transaction the service could have created.
"""

from __future__ import annotations

from decimal import Decimal

from hypothesis import strategies as st

from domain.money import WIDE, Asset, add, divide, multiply
from domain.pricing import Quote, Terms, quote_buy, quote_sell_for_payout, quote_sell_of_crypto
from domain.transaction import Order, TransactionType

FIAT_CODES = {0: "JPY", 1: "XF1", 2: "EUR", 3: "KWD"}
CRYPTO_CODES = {8: "BTC", 18: "ETH"}
LOWEST_PRICE = Decimal("0.01")
HIGHEST_PRICE = Decimal(10) ** 6


def fiat_assets() -> st.SearchStrategy[Asset]:
    """A fiat currency kept to 0 to 3 decimal places."""
    return st.integers(0, 3).map(lambda places: Asset(FIAT_CODES[places], places))


def crypto_assets() -> st.SearchStrategy[Asset]:
    """A crypto-currency kept to 8 (BTC-like) or 18 (ETH-like) decimal places."""
    return st.sampled_from((8, 18)).map(lambda places: Asset(CRYPTO_CODES[places], places))


def assets() -> st.SearchStrategy[Asset]:
    return st.one_of(fiat_assets(), crypto_assets())


def exact(asset: Asset, lowest: Decimal, highest: Decimal) -> st.SearchStrategy[Decimal]:
    """Amounts exact at the asset's precision between `lowest` and `highest`, spread over magnitudes."""
    lowest_units = int(asset.up(lowest).scaleb(asset.places, WIDE))
    highest_units = int(asset.down(highest).scaleb(asset.places, WIDE))
    lowest_units = max(lowest_units, 1)
    magnitudes = range(len(str(lowest_units)) - 1, len(str(highest_units)))

    @st.composite
    def draw(draw_: st.DrawFn) -> Decimal:
        digits = draw_(st.sampled_from(magnitudes))
        low = max(lowest_units, 10**digits)
        high = min(highest_units, 10 ** (digits + 1) - 1)
        units = draw_(st.integers(low, max(low, high)))
        return Decimal(f"{units}E-{asset.places}")

    return draw()


def fiat_amounts(
    asset: Asset, lowest: Decimal | None = None, highest: Decimal = Decimal(10) ** 7
) -> st.SearchStrategy[Decimal]:
    """Fiat amounts from one minor unit (or `lowest`) up to `highest`, exact at minor units."""
    return exact(asset, asset.quantum if lowest is None else lowest, highest)


def crypto_amounts(
    asset: Asset, lowest: Decimal | None = None, highest: Decimal = Decimal(10) ** 4
) -> st.SearchStrategy[Decimal]:
    """Crypto amounts from one quantum (or `lowest`) up to `highest`, exact at the asset's precision."""
    return exact(asset, asset.quantum if lowest is None else lowest, highest)


@st.composite
def prices(draw: st.DrawFn) -> Decimal:
    """Positive prices with 2 to 8 decimal places, from 0.01 up to 10^6, spread over magnitudes."""
    places = draw(st.integers(2, 8))
    return draw(exact(Asset("PRICE", places), LOWEST_PRICE, HIGHEST_PRICE))


def fractions(highest: str, places: int = 4) -> st.SearchStrategy[Decimal]:
    """Decimal fractions from 0 to `highest` with up to `places` decimal places."""
    top = int(Decimal(highest).scaleb(places, WIDE))
    return st.integers(0, top).map(lambda units: Decimal(f"{units}E-{places}"))


@st.composite
def terms(draw: st.DrawFn, fiat: Asset | None = None, crypto: Asset | None = None) -> Terms:
    """Terms of a payment method: partner fee rate 0..10 %, a fixed bank fee exact at minor units, a fixed
    network fee exact at the crypto's precision, and a wiggle room of 0..20 % each way."""
    fiat = fiat or draw(fiat_assets())
    crypto = crypto or draw(crypto_assets())
    bank_fee = draw(st.just(fiat.zero()) | exact(fiat, fiat.quantum, Decimal(5)))
    network_fee = draw(st.just(crypto.zero()) | exact(crypto, crypto.quantum, Decimal("0.001")))
    return Terms(
        fiat=fiat,
        crypto=crypto,
        fee_rate=draw(fractions("0.1")),
        bank_fee=bank_fee,
        network_fee=network_fee,
        wiggle_up=draw(fractions("0.2")),
        wiggle_down=draw(fractions("0.2")),
    )


def smallest_buy(terms: Terms, price: Decimal) -> Decimal:
    """A fiat value that surely buys at least one crypto quantum after all fees."""
    network_fiat = multiply(terms.network_fee, price)
    needed = add(terms.bank_fee, network_fiat, multiply(price, terms.crypto.quantum))
    needed = add(needed, terms.fiat.quantum, terms.fiat.quantum)
    return terms.fiat.up(divide(needed, Decimal(1) - terms.fee_rate))


def smallest_sell(terms: Terms, price: Decimal) -> Decimal:
    """A crypto amount whose value surely pays out at least one minor unit after all fees."""
    network_fiat = multiply(terms.network_fee, price)
    needed = add(terms.bank_fee, network_fiat, multiply(terms.fiat.quantum, Decimal(3)))
    needed = add(needed, multiply(terms.fiat.quantum, terms.fee_rate))
    return terms.crypto.up(divide(needed, price))


@st.composite
def buy_quotes(draw: st.DrawFn, terms_: Terms | None = None) -> tuple[Terms, Quote]:
    """A buy priced by `quote_buy` at a generated price, for a fiat value that covers the fees."""
    chosen = terms_ or draw(terms())
    price = draw(prices())
    lowest = smallest_buy(chosen, price)
    fiat_value = draw(fiat_amounts(chosen.fiat, lowest, max(lowest * 10, Decimal(10) ** 7)))
    return chosen, quote_buy(chosen, price, fiat_value)


@st.composite
def sell_quotes(draw: st.DrawFn, terms_: Terms | None = None) -> tuple[Terms, Quote]:
    """A sell priced by `quote_sell_for_payout` or `quote_sell_of_crypto`, either way covering the fees."""
    chosen = terms_ or draw(terms())
    price = draw(prices())
    if draw(st.booleans()):
        payout = draw(fiat_amounts(chosen.fiat, chosen.fiat.quantum, Decimal(10) ** 7))
        return chosen, quote_sell_for_payout(chosen, price, payout)
    lowest = smallest_sell(chosen, price)
    amount = draw(crypto_amounts(chosen.crypto, lowest, max(lowest * 10, Decimal(10) ** 3)))
    return chosen, quote_sell_of_crypto(chosen, price, amount)


CODES = st.text(alphabet="ABCDEFGHJKLMNPQRSTUVWXYZ0123456789", min_size=4, max_size=12)
DATA = st.dictionaries(
    st.text(alphabet="abcdefghijklmnopqrstuvwxyz", min_size=1, max_size=8),
    st.text(max_size=12),
    max_size=3,
)


@st.composite
def orders(draw: st.DrawFn, kind: TransactionType) -> Order:
    """An order of the given type, built around a real quote."""
    chosen, quote = draw(buy_quotes() if kind == TransactionType.BUY else sell_quotes())
    return Order(
        partner=draw(st.sampled_from(("partner-a", "partner-b"))),
        code=draw(CODES),
        type=kind,
        customer_code=draw(CODES),
        account_code=draw(st.none() | CODES),
        crypto=chosen.crypto.code,
        currency=chosen.fiat.code,
        payment_method=draw(st.sampled_from(("BANK", "CARD"))),
        destination_address=draw(CODES),
        quote=quote,
        limit_amount=quote.fiat_value,
        payment_reference=draw(st.none() | CODES),
        data=draw(DATA),
        deposit_path=None if kind == TransactionType.BUY else "m/44'/0'/0'/0/0",
    )
