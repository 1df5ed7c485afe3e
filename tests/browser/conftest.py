"""Fixtures of the console's browser tests: one real server per module, seeded through the HTTP API as the
platforms would, and one headless Chromium per module, its cookies cleared before each test.

The server is `broker-ledger serve --workers 1` with the demo settings on a database of its own (so that what
other process tests wrote is not in its pages), its var directory (client secrets) in tmp. `ledger` is what
the seeding made: partner demo's customer with a buy COMPLETED through its commit and the operator's sendout
reports (its commit and its first report more than a second apart, so that a whole second lies between
them), a sell left Initiated and a buy left Staged; a second customer of demo's with two sells in its
operator's payout queue (one paid and waiting in ToPayout, one paid another amount and BLOCKED); partner
other's customer with a buy of its own.

After each test, and at each page a test checks, the browser's console must hold no SEVERE entry (see
`tests/browser/pages.py`): a test that leaves one fails, whatever it asserted.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from selenium import webdriver

from application.settings import DEFAULT_SETTINGS, load_settings
from tests.browser.pages import Browser, missing_browser, output_folder, start_chromium
from tests.databases import scratch_database
from tests.e2e.support import (
    AddressSource,
    Api,
    Customer,
    active_customer,
    buy_body,
    client_secrets,
    expect,
    sell_body,
)
from tests.processes import ApiServer, running_server

BTC = load_settings(DEFAULT_SETTINGS).cryptos["BTC"]
TRANSACTIONS = "/transactions/custodian"


@dataclass(frozen=True)
class Ledger:
    """What the seeding wrote, and the clients' secrets to sign in with."""

    secrets: dict[str, str]
    customer: str  # partner demo's customer
    completed: str  # its buy, COMPLETED
    events: list[dict[str, Any]]  # the completed buy's history: version, type, timestamp (UTC), data
    between: datetime  # a whole second after the buy's commit and before its next event
    staged: str  # its second buy, Staged
    sell: str  # its sell, Initiated
    to_pay: str  # partner demo's second customer's sell, ToPayout
    blocked: str  # and its sell paid another amount, BLOCKED
    other_customer: str  # partner other's customer
    other: str  # partner other's buy

    def as_of(self, instant: datetime) -> list[dict[str, Any]]:
        """The completed buy's events up to `instant`."""
        return [event for event in self.events if event["timestamp"] <= instant]


def utc(text: str) -> datetime:
    return datetime.fromisoformat(text).astimezone(UTC)


@pytest.fixture(scope="module")
def server(database_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApiServer]:
    root = tmp_path_factory.mktemp("console")
    with (
        scratch_database(database_url, "broker_console") as database,
        running_server(database, root / "var", root / "server.log", workers=1) as started,
    ):
        yield started


@pytest.fixture(scope="module")
def ledger(server: ApiServer) -> Ledger:
    with (
        server.client("demo-broker") as broker,
        server.client("demo-operator") as operator,
        server.client("demo-auditor") as auditor,
        server.client("other-broker") as other_broker,
    ):
        return seed(broker, operator, auditor, other_broker, client_secrets(server.var))


def seed(broker: Api, operator: Api, auditor: Api, other_broker: Api, secrets: dict[str, str]) -> Ledger:
    addresses = AddressSource()
    customer = active_customer(broker, addresses())
    staged = expect(broker.post_json("/brokerbuy", buy_body(customer, "250.00", stage=True)), 201)
    code = staged["transaction"]["transactionCode"]
    committed = expect(broker.post(f"{TRANSACTIONS}/{code}/commit"), 200)["transaction"]
    assert committed["status"] == "Sending"
    between = utc(committed["updated"]).replace(microsecond=0) + timedelta(seconds=1)

    # the rest of the seeding while the second after the commit passes
    sell = sell_body(customer, cryptoAmount=Decimal("0.0002"))
    sold = expect(broker.post_json("/paymentrequest/brokersell", sell), 201)["transaction"]
    left = expect(broker.post_json("/brokerbuy", buy_body(customer, "40.00", stage=True)), 201)["transaction"]
    assert left["status"] == "Staged"
    to_pay, blocked = queued_sells(broker, operator, active_customer(broker, addresses()))
    other_customer = active_customer(other_broker, addresses())
    other = expect(other_broker.post_json("/brokerbuy", buy_body(other_customer, "60.00")), 201)
    while (wait := (between - datetime.now(UTC)).total_seconds() + 0.05) > 0:
        time.sleep(wait)

    tx_id = uuid.uuid4().hex * 2
    fewer = {"transactionCode": code, "txId": tx_id, "confirmations": BTC.required_confirmations - 1}
    expect(operator.post_json("/chain/sendouts", fewer), 200)
    enough = {**fewer, "confirmations": BTC.required_confirmations}
    assert expect(operator.post_json("/chain/sendouts", enough), 200)["transaction"]["status"] == "COMPLETED"

    history = expect(auditor.get(f"{TRANSACTIONS}/{code}/history"), 200)
    events = [{**event, "timestamp": utc(event["timestamp"])} for event in history["events"]]
    assert len(events) >= 3 and events[1]["timestamp"] < between < events[2]["timestamp"], events
    # reads that wait for the partners' read models and postings to pass their last writes
    expect(broker.get("/reserves"), 200)
    expect(other_broker.get("/reserves"), 200)
    expect(auditor.get(f"{TRANSACTIONS}/{left['transactionCode']}"), 200)
    return Ledger(
        secrets=secrets,
        customer=customer.code,
        completed=code,
        events=events,
        between=between,
        staged=left["transactionCode"],
        sell=sold["transactionCode"],
        to_pay=to_pay,
        blocked=blocked,
        other_customer=other_customer.code,
        other=other["transaction"]["transactionCode"],
    )


def queued_sells(broker: Api, operator: Api, customer: Customer) -> tuple[str, str]:
    """Two sells of `customer` in the operator's payout queue: one paid (ToPayout), one paid another amount
    (BLOCKED)."""
    codes = []
    for paid, status in ((Decimal("0.0003"), "ToPayout"), (Decimal("0.0001"), "BLOCKED")):
        sell = sell_body(customer, cryptoAmount=Decimal("0.0003"))
        sold = expect(broker.post_json("/paymentrequest/brokersell", sell), 201)["transaction"]
        report = {
            "cryptoCode": "BTC",
            "address": sold["destinationCryptoAddress"],
            "txId": uuid.uuid4().hex * 2,
            "cryptoAmount": paid,
            "confirmations": BTC.required_confirmations,
        }
        assert expect(operator.post_json("/chain/deposits", report), 200)["transaction"]["status"] == status
        codes.append(sold["transactionCode"])
    return codes[0], codes[1]


@pytest.fixture(scope="module")
def chromium(tmp_path_factory: pytest.TempPathFactory) -> Iterator[webdriver.Chrome]:
    """One headless Chromium for the module, on a fresh profile; never skipped when it cannot start."""
    problem = missing_browser()
    if problem is not None:
        pytest.fail(problem, pytrace=False)
    driver = start_chromium(tmp_path_factory.mktemp("chromium-profile"))
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture
def browser(chromium: webdriver.Chrome, server: ApiServer) -> Browser:
    """The module's browser on the console of its server, signed in as nobody; what an earlier test left in
    the console (a late asset request) fails here."""
    driven = Browser(chromium, server.base_url, output_folder(), lambda: server.tail(12))
    driven.check_console()
    driven.forget_session()
    return driven


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    """A test that used the browser fails when the browser's console holds a SEVERE entry at its end."""
    result = yield
    funcargs = getattr(item, "funcargs", {})
    driven = funcargs.get("browser")
    if isinstance(driven, Browser):
        driven.check_console()
    return result


@pytest.fixture(scope="module")
def german_chromium(tmp_path_factory: pytest.TempPathFactory) -> Iterator[webdriver.Chrome]:
    """A second headless Chromium for the module, in German (de-DE), where a date field shows 27.11.2026."""
    problem = missing_browser()
    if problem is not None:
        pytest.fail(problem, pytrace=False)
    driver = start_chromium(tmp_path_factory.mktemp("chromium-profile-de"), language="de-DE")
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture
def german_browser(german_chromium: webdriver.Chrome, server: ApiServer) -> Iterator[Browser]:
    """The German browser on the console of the module's server, signed in as nobody; its console must hold
    no SEVERE entry at the end of the test."""
    driven = Browser(german_chromium, server.base_url, output_folder(), lambda: server.tail(12))
    driven.forget_console()
    driven.forget_session()
    yield driven
    driven.check_console()


@pytest.fixture
def blank_browser(chromium: webdriver.Chrome, tmp_path: Path) -> Browser:
    """The module's browser on no server (for pages of its own, `data:` URLs)."""
    driven = Browser(chromium, "", tmp_path)
    driven.forget_console()
    return driven
