"""Trust-level limits under concurrent requests: the limit admits exactly as many buys as fit, never more."""

from __future__ import annotations

import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from decimal import Decimal

import httpx
import pytest

from application.settings import DEFAULT_SETTINGS, load_settings
from tests.e2e.support import (
    Api,
    Connect,
    Customer,
    buy_body,
    describe,
    expect,
    expect_problem,
    limits_used,
    open_limit_windows,
    sell_body,
)

SETTINGS = load_settings(DEFAULT_SETTINGS)
PARALLEL = 30


def race(connect: Connect, token: str, path: str, body: dict) -> list[httpx.Response]:
    """Sends `body` PARALLEL times at once, each from its own connection."""
    start = threading.Barrier(PARALLEL)

    def send(_: int) -> httpx.Response:
        with connect(token) as client:
            start.wait()
            return client.post_json(path, body)

    with ThreadPoolExecutor(PARALLEL) as pool:
        return list(pool.map(send, range(PARALLEL)))


def check_outcome(responses: list[httpx.Response], admitted: int) -> None:
    statuses = Counter(response.status_code for response in responses)
    assert not [r for r in responses if r.status_code >= 500], [
        describe(r) for r in responses if r.status_code >= 500
    ]
    assert statuses == {201: admitted, 422: PARALLEL - admitted}, statuses
    for response in responses:
        if response.status_code == 422:
            expect_problem(response, 422, "trust_level_limit_exceeded")
    codes = {expect(r, 201)["transaction"]["transactionCode"] for r in responses if r.status_code == 201}
    assert len(codes) == admitted


def test_concurrent_buys_fill_the_daily_limit_exactly(
    connect: Connect, tokens: dict[str, str], broker: Api, customer: Customer
) -> None:
    daily = SETTINGS.trust_levels["Basic"].limit("buy", "daily")  # 1000 EUR
    open_limit_windows(broker, customer)  # a buy of 10
    expect(broker.post_json("/brokerbuy", buy_body(customer, 290)), 201)
    assert limits_used(broker, customer.code)["buy", "daily"] == 300
    admitted = int((daily - 300) / 100)  # 7 buys of 100 fit, the other 23 must be refused

    responses = race(connect, tokens["demo-broker"], "/brokerbuy", buy_body(customer, 100))

    check_outcome(responses, admitted)
    assert limits_used(broker, customer.code)["buy", "daily"] == daily
    expect_problem(broker.post_json("/brokerbuy", buy_body(customer, 5)), 422, "trust_level_limit_exceeded")


@pytest.mark.parametrize("stage", [True, False], ids=["staged", "sending"])
def test_concurrent_buys_of_a_fresh_customer_never_pass_the_limit(
    connect: Connect, tokens: dict[str, str], customer: Customer, stage: bool
) -> None:
    body = {**buy_body(customer, 250), "stage": stage}  # 4 of 250 fit in 1000

    responses = race(connect, tokens["demo-broker"], "/brokerbuy", body)

    check_outcome(responses, 4)


def test_concurrent_sells_fill_the_daily_limit_exactly(
    connect: Connect, tokens: dict[str, str], broker: Api, customer: Customer
) -> None:
    daily = SETTINGS.trust_levels["Basic"].limit("sell", "daily")
    open_limit_windows(broker, customer)
    used = limits_used(broker, customer.code)["sell", "daily"]
    payout = Decimal(100)
    admitted = int((daily - used) // payout)

    responses = race(
        connect, tokens["demo-broker"], "/paymentrequest/brokersell", sell_body(customer, fiatValue=payout)
    )

    check_outcome(responses, admitted)
    addresses = {
        expect(r, 201)["transaction"]["destinationCryptoAddress"] for r in responses if r.status_code == 201
    }
    assert len(addresses) == admitted  # one deposit address per sell, even when created at once
    assert limits_used(broker, customer.code)["sell", "daily"] == used + admitted * payout
