"""Reconciliation (issue 28): `GET /reconciliation?from=&to=` and `broker-ledger audit reconcile`, end to end
on the real app in-process (projections on, a database of its own) with a clock the tests move.

One history in two periods: the first clean (opening balances, a buy sent out and confirmed, a sell paid,
confirmed and paid out), the second with one report of each kind of difference (a payment to an address of
no sell, a payment to an expired sell, a buy committed and never sent out, a payment of another amount, the
recorded sendout reported again with fewer confirmations, a second transfer for a paid sell). Both are read
over HTTP and on the command line, whose exit code tells a clean period (0) from one with differences (1).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row
from psycopg.sql import SQL, Identifier, Placeholder

from application.credentials import VAR_ENV
from application.store.database import DATABASE_URL_ENV
from bench.clock import FakeClock
from interface.cli.main import main
from tests.e2e.support import (
    AddressSource,
    Customer,
    buy_body,
    deposit_report,
    sell_body,
    unique_code,
)
from tests.in_process import InProcessClient, RoleCalls, in_process_app

CLOCK = FakeClock(datetime(2026, 4, 1, 9, 0, tzinfo=UTC))
client = in_process_app(projections=True, own_database="broker_reconciliation", clock=CLOCK)


def iso(at: datetime) -> str:
    return at.isoformat().replace("+00:00", "Z")


class Desk(RoleCalls):
    def customer(self, addresses: AddressSource) -> Customer:
        code = unique_code("rec")
        self.call("broker", "POST", "/customer", {"customerCode": code, "trustLevel": "Basic"})
        self.call("broker", "PUT", f"/customer/{code}", {"status": "ACTIVE"})
        address = addresses()
        account = self.call(
            "broker", "POST", f"/customer/{code}/accounts", {"customerCryptoAddress": address}
        )
        return Customer(code, account["accountCode"], address, "")

    def opening(self, code: str, amount: Decimal, reserve: dict[str, str]) -> None:
        body = {"kind": "OpeningBalance", "code": code, "amount": amount, "toReserve": reserve}
        self.call("operator", "POST", "/reserves/adjustments", body)

    def sendout(self, code: str, tx_id: str, confirmations: int, status: int | None = None) -> Any:
        body = {"transactionCode": code, "txId": tx_id, "confirmations": confirmations}
        return self.call("operator", "POST", "/chain/sendouts", body, status)

    def deposit(self, report: dict[str, Any], status: int | None = None) -> Any:
        return self.call("operator", "POST", "/chain/deposits", report, status)

    def sell(self, customer: Customer) -> dict[str, Any]:
        body = sell_body(customer, cryptoAmount=Decimal("0.001"))
        return self.call("broker", "POST", "/paymentrequest/brokersell", body)["transaction"]

    def reconciliation(self, start: datetime, end: datetime, role: str = "auditor") -> Any:
        return self.call(role, "GET", f"/reconciliation?from={iso(start)}&to={iso(end)}")


@dataclass
class History:
    start: datetime
    middle: datetime
    end: datetime
    codes: dict[str, str]


@pytest.fixture(scope="module")
def history(client: InProcessClient) -> History:
    roles = {"broker": "demo-broker", "operator": "demo-operator", "auditor": "demo-auditor"}
    desk = Desk(client, {role: client.headers_of(name) for role, name in roles.items()})
    desk.headers["other"] = client.headers_of("other-operator")
    addresses = AddressSource()
    start = CLOCK.advance(1)
    CLOCK.advance(1)
    desk.opening("BTC", Decimal(2), {"name": "hot-wallet", "type": "HotWallet"})
    desk.opening("EUR", Decimal(1000), {"name": "bank", "type": "Exchange"})
    alice = desk.customer(addresses)
    sent = desk.call("broker", "POST", "/brokerbuy", buy_body(alice, 100))["transaction"]["transactionCode"]
    desk.sendout(sent, "out-1", 1)
    desk.sendout(sent, "out-1", 2)
    sold = desk.sell(alice)
    desk.deposit(deposit_report(sold, 2, tx_id="in-1"))
    desk.call("operator", "PUT", f"/transactions/custodian/{sold['transactionCode']}/payout", {})
    late = desk.sell(alice)
    middle = CLOCK.advance(minutes=31)  # past the late sell's validUntil
    CLOCK.advance(1)
    unknown = {**deposit_report(late, 1, tx_id="in-stray"), "address": addresses()}
    desk.deposit(unknown, status=404)
    desk.deposit(unknown, status=404)  # the watcher's retry: one report
    desk.deposit(deposit_report(late, 1, tx_id="in-late"))  # its validUntil passed: PaidLate
    waiting = desk.call("broker", "POST", "/brokerbuy", buy_body(alice, 50))["transaction"]["transactionCode"]
    blocked = desk.sell(alice)
    desk.deposit(deposit_report(blocked, 1, amount=Decimal("0.0009"), tx_id="in-short"))
    desk.sendout(sent, "out-1", 1)  # fewer confirmations than recorded
    desk.deposit(deposit_report(sold, 2, tx_id="in-again"), status=409)  # a second transfer
    end = CLOCK.advance(1)
    CLOCK.advance(1)
    codes = {"sent": sent, "sold": sold["transactionCode"], "late": late["transactionCode"]}
    codes |= {"waiting": waiting, "blocked": blocked["transactionCode"]}
    return History(start, middle, end, codes)


@pytest.fixture(scope="module")
def desk(client: InProcessClient, history: History) -> Desk:
    roles = {"auditor": "demo-auditor", "operator": "demo-operator", "broker": "demo-broker"}
    headers = {role: client.headers_of(name) for role, name in roles.items()}
    return Desk(client, headers | {"other": client.headers_of("other-operator")})


def by_reserve(answer: Any) -> dict[tuple[str, str], dict[str, Any]]:
    return {(r["name"], r["code"]): r for r in answer["reserves"]}


def test_a_clean_period_rolls_the_reserves_forward_and_matches_every_report(desk, history):
    answer = desk.reconciliation(history.start, history.middle)
    assert answer["clean"] is True
    assert answer["differences"] == []
    reserves = by_reserve(answer)
    assert all(r["balanced"] for r in reserves.values())
    bank = reserves[("bank", "EUR")]
    assert bank["opening"] == 0
    assert Decimal(str(bank["opening"])) + Decimal(str(bank["postings"])) == Decimal(str(bank["closing"]))
    assert bank["closing"] > 1000  # the opening balance, the buyer's payment in, the seller's payout out
    matched = {(r["transactionCode"], r["event"]): r for r in answer["reports"]}
    assert matched[(history.codes["sent"], "SendoutSeen")]["posted"] is None
    assert matched[(history.codes["sent"], "Completed")]["posted"] is True
    assert matched[(history.codes["sold"], "ToPayout")]["posted"] is True
    assert matched[(history.codes["sold"], "ToPayout")]["txId"] == "in-1"


def test_a_period_with_one_of_each_difference_lists_them_by_kind(desk, history):
    answer = desk.reconciliation(history.middle, history.end, role="operator")
    assert answer["clean"] is False
    kinds: dict[str, list[dict[str, Any]]] = {}
    for difference in answer["differences"]:
        kinds.setdefault(difference["kind"], []).append(difference)
    codes = history.codes
    assert sorted(kinds) == [
        "amount_mismatch",
        "confirmation_mismatch",
        "expected_not_reported",
        "reported_not_expected",
        "reported_twice",
    ]
    unexpected = {(d["txId"], d["transactionCode"]) for d in kinds["reported_not_expected"]}
    assert unexpected == {("in-stray", None), ("in-late", codes["late"])}
    assert [d["transactionCode"] for d in kinds["expected_not_reported"]] == [codes["waiting"]]
    assert [(d["txId"], d["transactionCode"]) for d in kinds["amount_mismatch"]] == [
        ("in-short", codes["blocked"])
    ]
    assert [(d["txId"], d["transactionCode"]) for d in kinds["confirmation_mismatch"]] == [
        ("out-1", codes["sent"])
    ]
    assert [d["txId"] for d in kinds["reported_twice"]] == ["in-again"]
    assert all(r["balanced"] for r in answer["reserves"])
    assert {r["event"] for r in answer["reports"]} == {"PaidLate", "Blocked"}


def test_the_period_before_anything_is_clean_and_another_partner_sees_nothing_of_it(desk, history):
    before = history.start - timedelta(days=1)
    assert desk.reconciliation(before, history.start) == {
        "from": iso(before),
        "to": iso(history.start),
        "clean": True,
        "page": 1,
        "pageSize": 100,
        "totalPages": 0,
        "reportsTotal": 0,
        "differencesTotal": 0,
        "reserves": [],
        "reports": [],
        "differences": [],
    }
    other = desk.reconciliation(history.start, history.end, role="other")
    assert other["clean"] is True
    assert other["reports"] == [] and other["differences"] == []


@pytest.mark.parametrize(
    "query",
    [
        "from=2026-04-01&to=2026-04-02T00:00:00Z",  # no time, no offset
        "to=2026-04-02T00:00:00Z",  # from missing
    ],
)
def test_malformed_bounds_are_400(desk, query):
    answer = desk.call("auditor", "GET", f"/reconciliation?{query}", status=400)
    assert answer["code"] in ("malformed_request", "validation_failed")


def test_a_to_before_from_is_the_empty_period_at_to(desk, history):
    answer = desk.reconciliation(history.end, history.middle)
    assert (answer["from"], answer["to"]) == (iso(history.middle), iso(history.middle))
    assert answer["reports"] == []
    assert all(r["postings"] == 0 and r["balanced"] for r in answer["reserves"])


def test_a_broker_may_not_reconcile(desk, history):
    desk.call("broker", "GET", f"/reconciliation?from={iso(history.start)}&to={iso(history.end)}", status=403)


@pytest.fixture
def cli(client: InProcessClient, history: History, monkeypatch: pytest.MonkeyPatch, tmp_path) -> History:
    monkeypatch.setenv(DATABASE_URL_ENV, client.database_url)
    monkeypatch.setenv(VAR_ENV, str(tmp_path / "var"))
    return history


def run(*argv: str) -> int:
    with pytest.raises(SystemExit) as exit_:
        main(list(argv))
    return exit_.value.code


def test_the_command_exits_0_on_a_clean_period(cli, capsys):
    assert (
        run("audit", "reconcile", "--from", iso(cli.start), "--to", iso(cli.middle), "--partner", "demo") == 0
    )
    out = capsys.readouterr().out
    assert "OK      reserve bank EUR: 0 + " in out
    assert f"{cli.codes['sent']} Completed 2 confirmation(s), posted" in out
    assert out.rstrip().endswith("audit reconcile: clean")


def test_the_command_exits_1_and_lists_each_difference(cli, capsys):
    assert run("audit", "reconcile", "--from", iso(cli.middle), "--to", iso(cli.end)) == 1
    out = capsys.readouterr().out
    for kind in (
        "reported_not_expected",
        "expected_not_reported",
        "amount_mismatch",
        "confirmation_mismatch",
    ):
        assert f"DIFF    {kind}: " in out
    assert "DIFF    reported_twice: deposit in-again" in out
    assert "partner other:" not in out  # no book of its own in this history
    assert out.rstrip().endswith("audit reconcile: 6 difference(s)")


def test_the_command_refuses_a_malformed_bound(cli, capsys):
    assert run("audit", "reconcile", "--from", "yesterday", "--to", iso(cli.end)) == 2
    refusal = capsys.readouterr().err
    assert "audit reconcile: --from 'yesterday' must be an RFC 3339 date-time" in refusal
    assert "query parameter" not in refusal  # the command line's words, not the HTTP's
    assert run("audit", "reconcile", "--from", iso(cli.start), "--to", "9999-12-31T23:59:59-01:00") == 2
    assert "--to '9999-12-31T23:59:59-01:00' must be" in capsys.readouterr().err


@pytest.mark.parametrize(
    "query",
    [
        "from=0001-01-01T00:00:00%2B01:00&to=2026-04-02T00:00:00Z",  # before the year 1 in UTC
        "from=2026-04-01T00:00:00Z&to=9999-12-31T23:59:59-01:00",  # after the year 9999 in UTC
        "from=20260401T000000Z&to=2026-04-02T00:00:00Z",
    ],
)
def test_bounds_outside_the_years_1_to_9999_in_utc_or_of_another_form_are_400(desk, query):
    answer = desk.call("auditor", "GET", f"/reconciliation?{query}", status=400)
    assert answer["code"] == "malformed_request" and "must be an RFC 3339 date-time" in answer["detail"]
    assert "0001 to 9999" in answer["detail"]


def test_the_first_and_last_instants_of_the_calendar_are_bounds_like_any_other(desk):
    for start, end, shown in [
        ("0001-01-01T00:00:00Z", "0001-01-02T00:00:00%2B01:00", "0001-01-01T23:00:00Z"),
        ("9999-12-30T23:59:59Z", "9999-12-31T23:59:59.999999Z", "9999-12-31T23:59:59.999999Z"),
    ]:
        answer = desk.call("auditor", "GET", f"/reconciliation?from={start}&to={end}")
        assert answer["reports"] == [] and answer["to"] == shown


@contextmanager
def postings_lost(database_url: str, transaction_code: str, event_type: str) -> Iterator[int]:
    """The postings of one event of a transaction taken out of `read.postings` (as a tampered or broken
    ledger would lack them), put back at the end; yields how many were taken out."""
    table = Identifier("read", "postings")
    with psycopg.connect(database_url, autocommit=True, row_factory=dict_row) as conn:
        taken = conn.execute(
            SQL("DELETE FROM {} WHERE transaction_code = %s AND event = %s RETURNING *").format(table),
            (transaction_code, event_type),
        ).fetchall()
        try:
            yield len(taken)
        finally:
            for row in taken:
                columns = SQL(", ").join(map(Identifier, row))
                values = SQL(", ").join([Placeholder()] * len(row))
                conn.execute(
                    SQL("INSERT INTO {} ({}) VALUES ({})").format(table, columns, values), list(row.values())
                )


def test_a_report_whose_posting_is_lost_is_not_posted_and_its_reserves_unbalanced(desk, history, client):
    """The sold sell's payment (the deposit report that made it ToPayout) lost its postings: over the whole
    history the report is listed `not_posted`, and the reserves it moved no longer add up to the balances
    kept; put back, the reconciliation is as before."""
    with postings_lost(client.database_url, history.codes["sold"], "ToPayout") as taken:
        assert taken > 0
        answer = desk.reconciliation(history.start, history.end + timedelta(days=1))
    kinds = {d["kind"] for d in answer["differences"]}
    assert {"not_posted", "reserve_unbalanced"} <= kinds
    lost = [d for d in answer["differences"] if d["kind"] == "not_posted"]
    assert [d["transactionCode"] for d in lost] == [history.codes["sold"]]
    assert desk.reconciliation(history.start, history.end + timedelta(days=1))["differences"] == [
        d for d in answer["differences"] if d["kind"] not in ("not_posted", "reserve_unbalanced")
    ]
