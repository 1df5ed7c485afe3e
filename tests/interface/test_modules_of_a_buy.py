"""How far a created buy travels through the project's modules: counted on a real buy over the real app.

How it counts: a profiler (`sys.setprofile`, and `threading.setprofile` for every thread the app starts: the
event loop's portal, the use cases' threads, the group committer) is installed before the app is built and
records, while one `POST /brokerbuy` is served, every call into a function of `domain`, `application`,
`interface` or `projections` made for it (under the app's entry on the event loop, on a use case's thread or
on the group committer's; not the app's background work that runs meanwhile). A module counts once however
often it is entered. A *call back* is a call into a module that is still running lower on the same thread's
stack, with another module of ours in between (the store calling back into the use case that called it): the
request went down through it and came back up into it. The answer's way out through the middleware is not a
call back: an ASGI `send` callable (a function of one parameter, `message`) wrapped by an inner middleware
calls the outer one's by the protocol's design; those are counted apart and printed.

The test prints both, so that every run shows where a buy goes, and fails on any call back. It sets no
ceiling on the number of modules (issue 38 withdrew issue 27's: a count of modules counts concerns, not
tangles); docs/architecture.md ("The path of a buy") says what they are."""

from __future__ import annotations

import io
import logging
import sys
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

import pytest
from litestar.testing import TestClient

from application.logs import JsonLines
from tests.in_process import InProcessClient, in_process_app
from tests.interface.conftest import AddressSource

OURS = ("domain.", "application.", "interface.", "projections.")
ENTRY = "interface.http.observability"  # the app's own entry: every request starts there
REQUEST_THREADS = ("use-case", "group-commit")  # the use cases' threads and the group committer
# 7 pairs before issue 27: the store ran the use case again; bodies checked text in a middleware
CALL_BACKS_AT_MOST = 0


@dataclass
class BuyTrace:
    """What the profiler saw while it was on: the modules entered, in order, and the call backs."""

    on: bool = False
    modules: list[str] = field(default_factory=list)
    call_backs: set[tuple[str, str]] = field(default_factory=set)
    answer_wrappers: set[str] = field(default_factory=set)

    def __call__(self, frame: FrameType, event: str, arg: Any) -> None:
        if not self.on or event != "call":
            return
        module = frame.f_globals.get("__name__", "")
        if not module.startswith(OURS):
            return
        below = _our_modules_below(frame)
        if not _serves_the_buy(module, below):
            return
        if module not in self.modules:
            self.modules.append(module)
        if not below or below[0] == module or module not in below[1:]:
            return
        if _sends_a_message(frame):
            self.answer_wrappers.add(f"{module}.{frame.f_code.co_name}")
        else:
            self.call_backs.add((below[0], module))


def _serves_the_buy(module: str, below: list[str]) -> bool:
    """Whether a call serves the request: on the event loop under the app's entry (the middleware and what
    it awaits), on a use case's thread, or on the group committer's; not the app's background work that
    happens to run meanwhile (the expiry sweeper, the callbacks' delivery, the leases, the health watch)."""
    if module == ENTRY or ENTRY in below:
        return True
    return threading.current_thread().name.startswith(REQUEST_THREADS)


def _sends_a_message(frame: FrameType) -> bool:
    """Whether `frame` runs an ASGI send callable: `send(message)`, as a middleware wraps it."""
    code = frame.f_code
    return code.co_varnames[: code.co_argcount] == ("message",)


def _our_modules_below(frame: FrameType) -> list[str]:
    """The modules of ours on the stack under `frame`, nearest first."""
    found: list[str] = []
    caller = frame.f_back
    while caller is not None:
        module = caller.f_globals.get("__name__", "")
        if module.startswith(OURS):
            found.append(module)
        caller = caller.f_back
    return found


@pytest.fixture(scope="module")
def service_log() -> Iterator[None]:
    """The service's log as `serve` writes it (`application.logs`), for this module only: the access log line
    of a request is part of serving it, whatever logging other tests of this worker left behind."""
    logger = logging.getLogger("broker_ledger")
    handler = logging.StreamHandler(io.StringIO())
    handler.setFormatter(JsonLines())
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


@pytest.fixture(scope="module")
def trace(service_log: None) -> Iterator[BuyTrace]:
    traced = BuyTrace()
    sys.setprofile(traced)
    threading.setprofile(traced)
    try:
        yield traced
    finally:
        threading.setprofile(None)  # type: ignore[arg-type]
        sys.setprofile(None)


client = in_process_app(after=("trace",))  # built once the profiler is on: every thread it starts is profiled


def buy_body(client: TestClient, headers: dict[str, str]) -> dict[str, Any]:
    code = f"path-{uuid.uuid4().hex[:10]}"
    created = client.post("/customer", json={"customerCode": code, "trustLevel": "Basic"}, headers=headers)
    assert created.status_code == 201, created.text
    assert client.put(f"/customer/{code}", json={"status": "ACTIVE"}, headers=headers).status_code == 200
    address = AddressSource()()
    opened = client.post(
        f"/customer/{code}/accounts", json={"customerCryptoAddress": address}, headers=headers
    )
    assert opened.status_code == 201, opened.text
    return {
        "customerCode": code,
        "currencyCode": "EUR",
        "cryptoCode": "BTC",
        "fiatValue": 100,
        "destinationAddress": address,
        "paymentMethodCode": "BANK_EUR_BUY",
    }


def test_a_created_buy_prints_the_modules_it_passes_and_calls_back_into_none(
    client: InProcessClient, trace: BuyTrace
) -> None:
    headers = client.headers_of("demo-broker")
    body = buy_body(client, headers)
    first = client.post("/brokerbuy", json=body, headers={**headers, "Idempotency-Key": uuid.uuid4().hex})
    assert first.status_code == 201, first.text  # the first buy warms what is loaded once
    trace.on = True
    try:
        answer = client.post(
            "/brokerbuy", json=body, headers={**headers, "Idempotency-Key": uuid.uuid4().hex}
        )
    finally:
        trace.on = False
    assert answer.status_code == 201, answer.text

    print(f"\na created buy passes {len(trace.modules)} modules of ours:")
    for package in ("interface", "application", "domain", "projections"):
        inside = [module for module in trace.modules if module.split(".")[0] == package]
        print(f"  {package} ({len(inside)}): {', '.join(inside)}")
    print(f"calls back into a module below on the stack ({len(trace.call_backs)} pairs, caller -> callee):")
    for caller, callee in sorted(trace.call_backs):
        print(f"  {caller} -> {callee}")
    print(f"the answer goes out through the send wrappers {', '.join(sorted(trace.answer_wrappers))}")
    assert trace.modules, "the trace saw none of our modules: the profiler was not installed"
    assert len(trace.call_backs) <= CALL_BACKS_AT_MOST
