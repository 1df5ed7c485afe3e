"""Bursts of concurrent requests, and what a burst may have written: shared by the burst tests of the
session's server (`tests/process/test_burst_limits.py`) and of the rate-limited one
(`tests/servers/test_rate_limits.py`)."""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from decimal import Decimal

import httpx

from interface.idempotency.keys import transaction_code_for
from tests.e2e.support import Api, Customer, expect_problem, limits_used

THREADS = 16


def burst(send: Callable[[int], httpx.Response], count: int) -> tuple[list[httpx.Response], float]:
    """`count` requests from THREADS threads at once; the answers and the seconds the burst took."""
    started = time.monotonic()
    with ThreadPoolExecutor(THREADS) as pool:
        responses = list(pool.map(send, range(count)))
    return responses, time.monotonic() - started


def bought(api: Api, customer: Customer) -> Decimal:
    """What the customer has bought today, exactly: from its limit windows in the event store. The month's
    figure must be the same, and nothing is sold."""
    used = limits_used(api, customer.code)
    assert used[("buy", "daily")] == used[("buy", "monthly")], used
    assert used[("sell", "daily")] == used[("sell", "monthly")] == 0, used
    return used[("buy", "daily")]


def assert_never_created(api: Api, key: str) -> None:
    """No transaction was ever recorded under the Idempotency-Key `key`: its history, read from the event
    store (not a read model), does not exist."""
    code = transaction_code_for("demo", "/brokerbuy", key)
    expect_problem(api.get(f"/transactions/custodian/{code}/history"), 404, "transaction_not_found")
