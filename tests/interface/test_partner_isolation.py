"""Each partner pays only for its own history (issue 35, item 4), on the real app in-process with its
projections, a database of its own and a clock the tests move.

- A reconciliation reads the partner's own chain reports and postings of the period from the postings'
  view (`read.chain_reports`, by partner and time), never the event log: it answers while the log is
  locked, and as before after another partner recorded more.
- Its reports and differences are paged, with their totals; a period is at most 366 days (422 beyond).
- A partner's heavy reads (the reconciliation, lists and reserves `asOf`) run at most
  `[heavy_reads] per_partner` at a time, in worker threads: one more waits for a slot, then is refused with
  429 `heavy_reads_busy` and `Retry-After`, while other partners' reads and /health go on.
"""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import psycopg
import pytest

from application.settings import DEFAULT_SETTINGS
from bench.clock import FakeClock
from interface.shared import reserve_reading
from tests.e2e.support import AddressSource, Customer, buy_body, deposit_report, sell_body, unique_code
from tests.in_process import InProcessClient, RoleCalls, in_process_app

CLOCK = FakeClock(datetime(2026, 5, 4, 9, 0, tzinfo=UTC))
WAIT_SECONDS = 0.5
DEFAULT_HEAVY_READS = "[heavy_reads]\nper_partner = 1\nwait_seconds = 1\n"
assert DEFAULT_HEAVY_READS in DEFAULT_SETTINGS.read_text()
SETTINGS = DEFAULT_SETTINGS.read_text().replace(
    DEFAULT_HEAVY_READS, f"[heavy_reads]\nper_partner = 2\nwait_seconds = {WAIT_SECONDS}\n"
)
client = in_process_app(projections=True, own_database="broker_isolation", clock=CLOCK, settings=SETTINGS)
STRAYS = 3  # deposits to addresses of no sell: a disputed report, a difference, each


def iso(at: datetime) -> str:
    return at.isoformat().replace("+00:00", "Z")


class Desk(RoleCalls):
    def customer(self, broker: str, addresses: AddressSource) -> Customer:
        code = unique_code("iso")
        self.call(broker, "POST", "/customer", {"customerCode": code, "trustLevel": "Basic"})
        self.call(broker, "PUT", f"/customer/{code}", {"status": "ACTIVE"})
        address = addresses()
        body = {"customerCryptoAddress": address}
        account = self.call(broker, "POST", f"/customer/{code}/accounts", body)
        return Customer(code, account["accountCode"], address, "")

    def sent_buy(self, broker: str, operator: str, customer: Customer) -> str:
        """A buy committed, then its sendout seen and confirmed: three rows of chain reports."""
        code = self.call(broker, "POST", "/brokerbuy", buy_body(customer, 100))["transaction"][
            "transactionCode"
        ]
        for confirmations in (1, 2):
            body = {"transactionCode": code, "txId": f"out-{code}", "confirmations": confirmations}
            self.call(operator, "POST", "/chain/sendouts", body)
        return code

    def reconciliation(self, role: str, start: datetime, end: datetime, query: str = "") -> Any:
        return self.call(role, "GET", f"/reconciliation?from={iso(start)}&to={iso(end)}{query}")

    def get(self, role: str, path: str) -> Any:
        return self.client.get(path, headers=self.headers[role])


@dataclass
class History:
    start: datetime
    end: datetime
    addresses: AddressSource


@pytest.fixture(scope="module")
def desk(client: InProcessClient) -> Desk:
    names = {
        "broker": "demo-broker",
        "operator": "demo-operator",
        "auditor": "demo-auditor",
        "other-broker": "other-broker",
        "other": "other-operator",
    }
    return Desk(client, {role: client.headers_of(name) for role, name in names.items()})


@pytest.fixture(scope="module")
def history(desk: Desk) -> History:
    """Partner demo's small history: a buy sent out, a sell paid, a buy never sent out, STRAYS deposits to
    unknown addresses."""
    addresses = AddressSource()
    start = CLOCK.advance(1)
    CLOCK.advance(1)
    alice = desk.customer("broker", addresses)
    desk.sent_buy("broker", "operator", alice)
    sold = desk.call(
        "broker", "POST", "/paymentrequest/brokersell", sell_body(alice, cryptoAmount=Decimal("0.001"))
    )
    desk.call("operator", "POST", "/chain/deposits", deposit_report(sold["transaction"], 2, tx_id="in-1"))
    desk.call("broker", "POST", "/brokerbuy", buy_body(alice, 50))
    for number in range(STRAYS):
        stray = {**deposit_report(sold["transaction"], 1, tx_id=f"in-stray-{number}"), "address": addresses()}
        desk.call("operator", "POST", "/chain/deposits", stray, status=404)
    end = CLOCK.advance(1)
    CLOCK.advance(1)
    return History(start, end, addresses)


@pytest.fixture(scope="module")
def heavy(client: InProcessClient) -> Any:
    return client.app.state.runtime.heavy_reads


def test_a_reconciliation_is_the_same_after_another_partner_records_more(desk, history):
    before = desk.reconciliation("auditor", history.start, history.end)
    assert before["reportsTotal"] == 3 and before["differencesTotal"] == STRAYS + 1
    customer = desk.customer("other-broker", history.addresses)
    for _ in range(10):
        desk.sent_buy("other-broker", "other", customer)
    assert desk.reconciliation("other", history.start, CLOCK.now())["reportsTotal"] == 20
    assert desk.reconciliation("auditor", history.start, history.end) == before


def test_a_reconciliation_reads_nothing_of_the_event_log_and_answers_while_it_is_locked(
    desk, history, client
):
    desk.reconciliation("auditor", history.start, history.end)  # the postings hold the partner's writes
    with psycopg.connect(client.database_url) as conn:
        conn.execute("SET lock_timeout = '5s'")
        conn.execute("LOCK TABLE ledger.ledger_events IN ACCESS EXCLUSIVE MODE")
        with ThreadPoolExecutor(1) as pool:
            answer = pool.submit(desk.reconciliation, "auditor", history.start, history.end)
            done = answer.result(timeout=10)  # a read of the log would wait for the lock
        conn.rollback()
    assert done["reportsTotal"] == 3


def test_the_reports_and_differences_are_paged_with_their_totals(desk, history):
    whole = desk.reconciliation("auditor", history.start, history.end)
    pages = [
        desk.reconciliation("auditor", history.start, history.end, f"&page={n}&pageSize=2") for n in (1, 2, 3)
    ]
    assert [(p["page"], p["pageSize"], p["totalPages"]) for p in pages] == [(1, 2, 2), (2, 2, 2), (3, 2, 2)]
    assert all(p["differencesTotal"] == STRAYS + 1 and p["reportsTotal"] == 3 for p in pages)
    assert [len(p["differences"]) for p in pages] == [2, 2, 0]
    assert [d for p in pages for d in p["differences"]] == whole["differences"]
    assert [r for p in pages for r in p["reports"]] == whole["reports"]
    assert all(p["clean"] is False and p["reserves"] == whole["reserves"] for p in pages)


def test_a_period_of_367_days_is_refused_and_one_of_366_days_is_answered(desk, history):
    end = history.end
    refused = desk.call(
        "auditor", "GET", f"/reconciliation?from={iso(end - timedelta(days=367))}&to={iso(end)}", status=422
    )
    assert refused["code"] == "period_too_long"
    assert "a period is at most 366 days" in refused["detail"] and "367 days" in refused["detail"]
    answered = desk.reconciliation("auditor", end - timedelta(days=366), end)
    assert answered["reportsTotal"] == 3


def test_the_reconciliation_runs_in_a_worker_thread_not_on_the_event_loop(desk, history, monkeypatch):
    seen: list[bool] = []
    read = reserve_reading.read_reconciliation  # what GET /reconciliation reads through

    def spied(*args: Any, **kwargs: Any) -> Any:
        try:
            asyncio.get_running_loop()
            seen.append(True)
        except RuntimeError:
            seen.append(False)
        return read(*args, **kwargs)

    monkeypatch.setattr(reserve_reading, "read_reconciliation", spied)
    desk.reconciliation("auditor", history.start, history.end)
    assert seen == [False]


def test_a_partners_heavy_read_beyond_its_slots_is_refused_while_other_partners_and_health_go_on(
    desk, history, heavy
):
    taken = [heavy.try_enter("demo") for _ in range(heavy.per_partner)]
    try:
        assert taken == [True, True] and not heavy.try_enter("demo")
        period = f"from={iso(history.start)}&to={iso(history.end)}"
        for path in (f"/reconciliation?{period}", f"/reserves?asOf={iso(history.end)}"):
            refused = desk.get("operator", path)
            assert refused.status_code == 429, refused.text
            assert refused.headers["content-type"].startswith("application/problem+json")
            assert refused.headers["retry-after"] == "1" and refused.json()["code"] == "heavy_reads_busy"
        listed = desk.get("auditor", f"/transactions/custodian?asOf={iso(history.end)}")
        assert listed.status_code == 429 and listed.json()["code"] == "heavy_reads_busy"
        assert desk.get("auditor", "/transactions/custodian").status_code == 200  # no asOf: not heavy
        assert desk.get("operator", "/reserves").status_code == 200
        assert desk.get("other", f"/reconciliation?{period}").status_code == 200
        assert desk.get("other", f"/reserves?asOf={iso(history.end)}").status_code == 200
        assert desk.client.get("/health").status_code == 200
    finally:
        for _ in range(heavy.per_partner):
            heavy.leave("demo")
    assert desk.get("operator", f"/reconciliation?{period}").status_code == 200


def test_a_heavy_read_waits_for_a_slot_freed_within_the_wait(desk, history, heavy):
    for _ in range(heavy.per_partner):
        assert heavy.try_enter("demo")
    freed = threading.Timer(WAIT_SECONDS / 4, heavy.leave, ("demo",))
    try:
        freed.start()
        answer = desk.get("operator", f"/reconciliation?from={iso(history.start)}&to={iso(history.end)}")
        assert answer.status_code == 200, answer.text
    finally:
        freed.join()
        for _ in range(heavy.per_partner - 1):
            heavy.leave("demo")
    assert heavy.running("demo") == 0
