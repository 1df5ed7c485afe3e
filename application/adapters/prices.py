"""Price sources: fixed prices from the settings, or an exchange ticker over HTTP.

The ticker answers JSON such as
`{"buy": "60000.10", "sell": "59000.00", "timestamp": "2026-11-21T10:00:00Z"}`. Prices may be JSON
strings or numbers; both are read exactly as `Decimal`, never through `float`. A price the ticker
cannot vouch for (no answer, a malformed one, an absurd or stale one) is refused with
`PriceUnavailable`, so no quote is ever made from it.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Annotated
from urllib.parse import quote

import httpx
import msgspec

from application.ports import Clock, PriceSource
from application.settings import Settings
from domain.errors import PriceUnavailable
from domain.pricing import Price

MAX_CLOCK_SKEW = timedelta(seconds=60)  # a ticker timestamp further in the future is refused
MAX_CACHE_AGE = timedelta(seconds=5)  # a fresh ticker answer is reused for at most this long


class FixedPrices:
    """Prices written in the settings (`cryptos.<code>.prices.<currency>`), always current."""

    def __init__(self, settings: Settings, clock: Clock) -> None:
        self._settings = settings
        self._clock = clock

    def price(self, crypto: str, currency: str) -> Price:
        configured = self._settings.cryptos.get(crypto)
        fixed = configured.prices.get(currency) if configured is not None else None
        if fixed is None:
            raise PriceUnavailable(f"no price configured for {crypto} in {currency}")
        return Price(buy=fixed.buy, sell=fixed.sell, updated=self._clock.now())


class TickerAnswer(msgspec.Struct):
    """The ticker's JSON body; unknown fields are ignored, as exchanges add them freely."""

    buy: Decimal
    sell: Decimal
    timestamp: Annotated[datetime, msgspec.Meta(tz=True)]


@dataclass(frozen=True)
class _CachedPrice:
    price: Price
    fetched: datetime


class TickerPrices:
    """Prices from an exchange ticker over HTTP, sanity- and freshness-checked, cached briefly."""

    def __init__(self, settings: Settings, clock: Clock, client: httpx.Client | None = None) -> None:
        source = settings.price_source
        if not source.url:
            raise ValueError("price_source.url is required for a ticker price source")
        self._url = source.url
        self._timeout = source.timeout_seconds
        self._max_age = timedelta(seconds=source.max_age_seconds)
        self._cache_age = min(MAX_CACHE_AGE, self._max_age / 2)
        self._clock = clock
        self._owns_client = client is None
        self._client = (
            client if client is not None else httpx.Client(timeout=self._timeout, follow_redirects=False)
        )
        self._cache: dict[tuple[str, str], _CachedPrice] = {}
        self._pair_locks: dict[tuple[str, str], threading.Lock] = {}
        self._locks_lock = threading.Lock()

    def price(self, crypto: str, currency: str) -> Price:
        pair = (crypto, currency)
        with self._lock_for(pair):
            cached = self._cache.get(pair)
            if cached is not None and self._still_usable(cached):
                return cached.price
            price = self._fetch(crypto, currency)
            self._cache[pair] = _CachedPrice(price=price, fetched=self._clock.now())
            return price

    def close(self) -> None:
        """Close the HTTP client if this source made it."""
        if self._owns_client:
            self._client.close()

    def _lock_for(self, pair: tuple[str, str]) -> threading.Lock:
        """One lock per pair: a burst for one pair waits for a single request, other pairs go on."""
        with self._locks_lock:
            return self._pair_locks.setdefault(pair, threading.Lock())

    def _still_usable(self, cached: _CachedPrice) -> bool:
        now = self._clock.now()
        return now - cached.fetched < self._cache_age and now - cached.price.updated <= self._max_age

    def _fetch(self, crypto: str, currency: str) -> Price:
        pair = f"{crypto} in {currency}"
        url = self._url.format(crypto=quote(crypto, safe=""), currency=quote(currency, safe=""))
        body = self._get(pair, url)
        try:
            answer = msgspec.json.decode(body, type=TickerAnswer)
        except msgspec.DecodeError as error:
            raise PriceUnavailable(f"price ticker answered a malformed body for {pair}: {error}") from None
        self._check_sane(pair, answer)
        self._check_fresh(pair, answer.timestamp)
        return Price(buy=answer.buy, sell=answer.sell, updated=answer.timestamp)

    def _get(self, pair: str, url: str) -> bytes:
        try:
            response = self._client.get(url, timeout=self._timeout, follow_redirects=False)
        except httpx.TimeoutException:
            raise PriceUnavailable(
                f"price ticker did not answer within {self._timeout} s for {pair}"
            ) from None
        except (httpx.HTTPError, httpx.InvalidURL) as error:
            raise PriceUnavailable(f"price ticker unreachable for {pair}: {error}") from None
        if not response.is_success:
            raise PriceUnavailable(f"price ticker answered HTTP {response.status_code} for {pair}")
        return response.content

    def _check_sane(self, pair: str, answer: TickerAnswer) -> None:
        if not (answer.buy.is_finite() and answer.sell.is_finite()):
            raise PriceUnavailable(f"price ticker answered a non-finite price for {pair}")
        if answer.buy <= 0 or answer.sell <= 0:
            raise PriceUnavailable(
                f"price ticker answered a non-positive price for {pair}"
                f" (buy {answer.buy}, sell {answer.sell})"
            )
        if answer.sell > answer.buy:
            raise PriceUnavailable(
                f"price ticker answered a sell price above the buy price for {pair}"
                f" (buy {answer.buy}, sell {answer.sell})"
            )

    def _check_fresh(self, pair: str, timestamp: datetime) -> None:
        age = self._clock.now() - timestamp
        if age > self._max_age:
            raise PriceUnavailable(
                f"price for {pair} is stale: {age.total_seconds():.0f} s old,"
                f" more than {self._max_age.total_seconds():.0f} s"
            )
        if -age > MAX_CLOCK_SKEW:
            raise PriceUnavailable(f"price for {pair} is dated {(-age).total_seconds():.0f} s in the future")


def price_source_from(settings: Settings, clock: Clock) -> PriceSource:
    """The price source the settings name in `price_source.kind`."""
    kind = settings.price_source.kind
    if kind == "fixed":
        return FixedPrices(settings, clock)
    if kind == "ticker":
        return TickerPrices(settings, clock)
    raise ValueError(f"unknown price_source.kind {kind!r}: expected 'fixed' or 'ticker'")
