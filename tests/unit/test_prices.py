"""Price sources: fixed prices from the settings, and a ticker over HTTP to a real local server."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import msgspec
import pytest

from application.adapters.prices import (
    FixedPrices,
    TickerPrices,
    price_source_from,
)
from application.settings import Settings, load_settings
from bench.clock import FakeClock
from domain.errors import PriceUnavailable

NOW = datetime(2026, 11, 21, 10, 0, tzinfo=UTC)


@dataclass
class Answer:
    status: int = 200
    body: bytes = b""
    delay: float = 0.0
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class FakeExchange:
    """A local ticker: answers whatever the test sets, and records the paths it was asked for."""

    url: str
    answer: Answer = field(default_factory=Answer)
    requests: list[str] = field(default_factory=list)

    def quote(self, buy: object, sell: object, at: datetime = NOW) -> None:
        body = {"buy": buy, "sell": sell, "timestamp": at.isoformat().replace("+00:00", "Z")}
        self.answer = Answer(body=json.dumps(body).encode())

    def raw(self, body: bytes, status: int = 200, delay: float = 0.0) -> None:
        self.answer = Answer(status=status, body=body, delay=delay)


def _handler_for(exchange: FakeExchange) -> type[BaseHTTPRequestHandler]:
    class TickerHandler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            exchange.requests.append(self.path)
            answer = exchange.answer
            time.sleep(answer.delay)
            self.send_response(answer.status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(answer.body)))
            for name, value in answer.headers.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(answer.body)

        def log_message(self, format: str, *args: object) -> None:
            pass

    return TickerHandler


@pytest.fixture
def exchange() -> Iterator[FakeExchange]:
    exchange = FakeExchange(url="")
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(exchange))
    server.daemon_threads = True
    server.handle_error = lambda request, address: None  # a client that gave up is no news
    port = server.server_address[1]
    exchange.url = f"http://127.0.0.1:{port}/ticker/{{crypto}}/{{currency}}"
    thread = threading.Thread(target=server.serve_forever, args=(0.02,), daemon=True)
    thread.start()
    yield exchange
    server.shutdown()
    server.server_close()
    thread.join()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(NOW)


def ticker_settings(url: str, max_age: int = 60, timeout: float = 2.0) -> Settings:
    settings = load_settings()
    source = msgspec.structs.replace(
        settings.price_source,
        kind="ticker",
        url=url,
        max_age_seconds=max_age,
        timeout_seconds=timeout,
    )
    return msgspec.structs.replace(settings, price_source=source)


@pytest.fixture
def ticker(exchange: FakeExchange, clock: FakeClock) -> Iterator[TickerPrices]:
    prices = TickerPrices(ticker_settings(exchange.url), clock)
    yield prices
    prices.close()


def refusal(prices: TickerPrices, crypto: str = "BTC", currency: str = "EUR") -> str:
    with pytest.raises(PriceUnavailable) as refused:
        prices.price(crypto, currency)
    assert refused.value.code == "price_unavailable"
    return refused.value.detail


# Fixed prices


def test_fixed_prices_come_from_the_settings_dated_now(clock: FakeClock) -> None:
    price = FixedPrices(load_settings(), clock).price("BTC", "EUR")
    assert (price.buy, price.sell, price.updated) == (Decimal("60000.00"), Decimal("59000.00"), NOW)


def test_fixed_price_of_an_unknown_crypto_is_unavailable_and_names_the_pair(
    clock: FakeClock,
) -> None:
    with pytest.raises(PriceUnavailable, match="DOGE in EUR"):
        FixedPrices(load_settings(), clock).price("DOGE", "EUR")


def test_fixed_price_in_an_unpriced_currency_is_unavailable_and_names_the_pair(
    clock: FakeClock,
) -> None:
    with pytest.raises(PriceUnavailable, match="BTC in GBP"):
        FixedPrices(load_settings(), clock).price("BTC", "GBP")


def test_demo_settings_choose_fixed_prices(clock: FakeClock) -> None:
    assert isinstance(price_source_from(load_settings(), clock), FixedPrices)


def test_ticker_settings_choose_ticker_prices(clock: FakeClock) -> None:
    source = price_source_from(ticker_settings("http://127.0.0.1:9/{crypto}/{currency}"), clock)
    assert isinstance(source, TickerPrices)
    source.close()


# Ticker: the allowed side


def test_ticker_price_is_read_exactly_from_strings(exchange: FakeExchange, ticker: TickerPrices) -> None:
    exchange.quote("60000.123456789", "59000.000000001", at=NOW - timedelta(seconds=10))
    price = ticker.price("BTC", "EUR")
    assert price.buy == Decimal("60000.123456789")
    assert str(price.sell) == "59000.000000001"
    assert price.updated == NOW - timedelta(seconds=10)
    assert exchange.requests == ["/ticker/BTC/EUR"]


def test_ticker_price_given_as_json_numbers_stays_exact(exchange: FakeExchange, ticker: TickerPrices) -> None:
    exchange.raw(b'{"buy": 0.1, "sell": 0.1, "timestamp": "2026-11-21T10:00:00Z", "volume": 3}')
    price = ticker.price("BTC", "EUR")
    assert isinstance(price.buy, Decimal)
    assert (price.buy, price.sell) == (Decimal("0.1"), Decimal("0.1"))


def test_ticker_price_exactly_as_old_as_allowed_is_accepted(
    exchange: FakeExchange, ticker: TickerPrices
) -> None:
    exchange.quote("100", "99", at=NOW - timedelta(seconds=60))
    assert ticker.price("BTC", "EUR").buy == Decimal(100)


def test_ticker_price_slightly_ahead_of_our_clock_is_accepted(
    exchange: FakeExchange, ticker: TickerPrices
) -> None:
    exchange.quote("100", "99", at=NOW + timedelta(seconds=30))
    assert ticker.price("BTC", "EUR").sell == Decimal(99)


# Ticker: the refused side


def test_stale_ticker_price_is_refused(exchange: FakeExchange, ticker: TickerPrices) -> None:
    exchange.quote("100", "99", at=NOW - timedelta(seconds=61))
    assert "stale" in refusal(ticker)


def test_ticker_price_dated_far_in_the_future_is_refused(
    exchange: FakeExchange, ticker: TickerPrices
) -> None:
    exchange.quote("100", "99", at=NOW + timedelta(seconds=61))
    assert "future" in refusal(ticker)


def test_ticker_server_error_is_refused(exchange: FakeExchange, ticker: TickerPrices) -> None:
    exchange.raw(b'{"error": "down"}', status=500)
    assert "HTTP 500" in refusal(ticker)


def test_ticker_redirect_is_not_followed(exchange: FakeExchange, ticker: TickerPrices) -> None:
    exchange.answer = Answer(status=302, headers={"Location": "/ticker/BTC/USD"})
    assert "HTTP 302" in refusal(ticker)
    assert exchange.requests == ["/ticker/BTC/EUR"]


@pytest.mark.parametrize(
    "body",
    [
        b"not json",
        b'{"buy": "100", "sell": "99"}',
        b'{"buy": "lots", "sell": "99", "timestamp": "2026-11-21T10:00:00Z"}',
        b'{"buy": "100", "sell": "99", "timestamp": "2026-11-21T10:00:00"}',
    ],
    ids=["not json", "no timestamp", "not a number", "timestamp without zone"],
)
def test_malformed_ticker_body_is_refused(exchange: FakeExchange, ticker: TickerPrices, body: bytes) -> None:
    exchange.raw(body)
    assert "malformed" in refusal(ticker)


@pytest.mark.parametrize(("buy", "sell"), [("-1", "-2"), ("100", "0"), ("NaN", "99"), ("Infinity", "99")])
def test_non_positive_or_non_finite_ticker_price_is_refused(
    exchange: FakeExchange, ticker: TickerPrices, buy: str, sell: str
) -> None:
    exchange.quote(buy, sell)
    assert "price for BTC in EUR" in refusal(ticker)


def test_ticker_sell_price_above_buy_price_is_refused(exchange: FakeExchange, ticker: TickerPrices) -> None:
    exchange.quote("100", "101")
    assert "sell price above the buy price" in refusal(ticker)


def test_slow_ticker_is_refused_after_the_timeout(exchange: FakeExchange, clock: FakeClock) -> None:
    exchange.quote("100", "99")
    exchange.answer.delay = 1.0
    prices = TickerPrices(ticker_settings(exchange.url, timeout=0.3), clock)
    started = time.monotonic()
    assert "did not answer within 0.3 s" in refusal(prices)
    assert time.monotonic() - started < 0.9
    prices.close()


def test_unreachable_ticker_is_refused(clock: FakeClock) -> None:
    prices = TickerPrices(ticker_settings("http://127.0.0.1:9/{crypto}/{currency}"), clock)
    assert "unreachable" in refusal(prices)
    prices.close()


# Ticker: the cache


def test_second_ticker_request_within_the_cache_window_asks_the_exchange_once(
    exchange: FakeExchange, ticker: TickerPrices, clock: FakeClock
) -> None:
    exchange.quote("100", "99")
    first = ticker.price("BTC", "EUR")
    clock.advance(4)
    assert ticker.price("BTC", "EUR") == first
    assert len(exchange.requests) == 1


def test_ticker_request_after_the_cache_window_asks_the_exchange_again(
    exchange: FakeExchange, ticker: TickerPrices, clock: FakeClock
) -> None:
    exchange.quote("100", "99")
    ticker.price("BTC", "EUR")
    clock.advance(5)
    exchange.quote("110", "108", at=clock.now())
    assert ticker.price("BTC", "EUR").buy == Decimal(110)
    assert len(exchange.requests) == 2


def test_cache_window_is_at_most_half_the_allowed_age(exchange: FakeExchange, clock: FakeClock) -> None:
    prices = TickerPrices(ticker_settings(exchange.url, max_age=4), clock)
    exchange.quote("100", "99")
    prices.price("BTC", "EUR")
    clock.advance(2)
    exchange.quote("100", "99", at=clock.now())
    prices.price("BTC", "EUR")
    assert len(exchange.requests) == 2
    prices.close()


def test_cached_price_that_has_grown_stale_is_fetched_again(
    exchange: FakeExchange, ticker: TickerPrices, clock: FakeClock
) -> None:
    exchange.quote("100", "99", at=NOW - timedelta(seconds=58))
    ticker.price("BTC", "EUR")
    clock.advance(3)
    assert "stale" in refusal(ticker)
    assert len(exchange.requests) == 2


def test_each_pair_is_cached_on_its_own(exchange: FakeExchange, ticker: TickerPrices) -> None:
    exchange.quote("100", "99")
    ticker.price("BTC", "EUR")
    ticker.price("BTC", "USD")
    ticker.price("BTC", "EUR")
    assert exchange.requests == ["/ticker/BTC/EUR", "/ticker/BTC/USD"]


def test_refused_ticker_answer_is_not_cached(exchange: FakeExchange, ticker: TickerPrices) -> None:
    exchange.raw(b"", status=503)
    refusal(ticker)
    exchange.quote("100", "99")
    assert ticker.price("BTC", "EUR").buy == Decimal(100)
    assert len(exchange.requests) == 2


def test_burst_of_concurrent_requests_for_one_pair_asks_the_exchange_once(
    exchange: FakeExchange, ticker: TickerPrices
) -> None:
    exchange.quote("100", "99")
    exchange.answer.delay = 0.1
    results: list[Decimal] = []
    threads = [
        threading.Thread(target=lambda: results.append(ticker.price("BTC", "EUR").buy)) for _ in range(10)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results == [Decimal(100)] * 10
    assert len(exchange.requests) == 1
