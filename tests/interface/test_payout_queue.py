"""The operator's payout queue (issue 39): over the API, the operator lists and reads its partner's
transactions (`GET /transactions/custodian`), narrowed to what waits for it: sells to pay out (`ToPayout`,
`PayoutConfirming`), blocked sells and late payments to resolve (`BLOCKED`, `paidLate=true`); at an instant
(`asOf`) a late payment is one only once it was seen. The console's payout queue (`/console/payouts`) shows
them by section, each with the call that moves it on. Another partner's clients never see them.

On the real app in-process (projections on, a database of its own) with a clock the tests move, so that sells
expire and the sweep cancels them before their payment comes."""

from __future__ import annotations

import html
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import pytest

from application.sweeper import OverdueTransactions
from bench.clock import FakeClock
from interface.environment import DEFAULT_CONSOLE_ORIGIN
from interface.shared.query_parameters import STATUSES
from tests.e2e.support import AddressSource, Customer, client_secrets, deposit_report, sell_body, unique_code
from tests.in_process import InProcessClient, RoleCalls, in_process_app

CLOCK = FakeClock(datetime(2026, 5, 4, 9, 0, tzinfo=UTC))
client = in_process_app(projections=True, own_database="broker_payout_queue", clock=CLOCK)
LIST = "/transactions/custodian"
ROLES = {
    "broker": "demo-broker",
    "operator": "demo-operator",
    "auditor": "demo-auditor",
    "other broker": "other-broker",
    "other operator": "other-operator",
}


def iso(at: datetime) -> str:
    return at.isoformat().replace("+00:00", "Z")


class Desk(RoleCalls):
    def customer(self, addresses: AddressSource, broker: str = "broker") -> Customer:
        code = unique_code("queue")
        self.call(broker, "POST", "/customer", {"customerCode": code, "trustLevel": "Basic"})
        self.call(broker, "PUT", f"/customer/{code}", {"status": "ACTIVE"})
        address = addresses()
        account = self.call(broker, "POST", f"/customer/{code}/accounts", {"customerCryptoAddress": address})
        return Customer(code, account["accountCode"], address, "")

    def sell(self, customer: Customer, broker: str = "broker") -> dict[str, Any]:
        body = sell_body(customer, cryptoAmount=Decimal("0.001"))
        return self.call(broker, "POST", "/paymentrequest/brokersell", body)["transaction"]

    def pay(self, sell: dict[str, Any], operator: str = "operator", **report: Any) -> dict[str, Any]:
        body = deposit_report(sell, 2, **report)
        return self.call(operator, "POST", "/chain/deposits", body)["transaction"]

    def codes(self, role: str, **query: str) -> list[str]:
        """The codes a role's list gives for `query`, newest first (one page of up to 200)."""
        answer = self.call(
            role, "GET", LIST + "?" + "&".join(f"{k}={v}" for k, v in {**query, "pageSize": "200"}.items())
        )
        return [record["transactionCode"] for record in answer["records"]]


@dataclass(frozen=True)
class Queue:
    desk: Desk
    to_pay: str  # ToPayout
    confirming: str  # PayoutConfirming
    blocked: str  # BLOCKED: paid another amount
    late: str  # CANCELLED by the sweep, then paid: a late payment
    expired: str  # CANCELLED by the sweep, never paid
    refunding: str  # paid late, its refund decided: Refunding
    before_late_payment: datetime  # after the sweep, before the late payment was seen
    other_blocked: str  # partner other's BLOCKED sell


def code(transaction: dict[str, Any]) -> str:
    return transaction["transactionCode"]


@pytest.fixture(scope="module")
def queue(client: InProcessClient) -> Queue:
    desk = Desk(client, {role: client.headers_of(name) for role, name in ROLES.items()})
    addresses = AddressSource()
    alice = desk.customer(addresses)
    to_pay, confirming, blocked, late, expired, refunding = (desk.sell(alice) for _ in range(6))
    CLOCK.advance(1)
    assert desk.pay(to_pay)["status"] == "ToPayout"
    assert desk.pay(confirming)["status"] == "ToPayout"
    desk.call("operator", "PUT", f"{LIST}/{confirming['transactionCode']}/payoutconfirming", {})
    assert desk.pay(blocked, amount=Decimal("0.0009"))["status"] == "BLOCKED"
    CLOCK.advance(minutes=31)  # past validUntil (BANK_EUR_SELL: 30 minutes)
    runtime = client.app.state.runtime
    swept = OverdueTransactions(runtime.ledger, runtime.use_cases.settlement).expire_overdue()
    assert {code(late), code(expired), code(refunding)} <= set(swept)
    before_late_payment = CLOCK.advance(30)
    CLOCK.advance(30)
    desk.pay(refunding, tx_id=f"late-{code(refunding)}")
    refund = {"resolution": "Refund", "reason": "paid after the quote expired"}
    resolved = desk.call("operator", "POST", f"{LIST}/{code(refunding)}/resolution", refund)
    assert resolved["transaction"]["status"] == "Refunding"
    paid_late = desk.pay(late, tx_id=f"late-{late['transactionCode']}")
    assert (paid_late["status"], paid_late["blockchainTransactionId"]) == (
        "CANCELLED",
        f"late-{late['transactionCode']}",
    )
    bob = desk.customer(addresses, "other broker")
    other = desk.sell(bob, "other broker")
    assert desk.pay(other, "other operator", amount=Decimal("0.0009"))["status"] == "BLOCKED"
    return Queue(
        desk,
        code(to_pay),
        code(confirming),
        code(blocked),
        code(late),
        code(expired),
        code(refunding),
        before_late_payment,
        code(other),
    )


def test_the_operator_lists_its_partners_sells_waiting_for_a_payout(queue: Queue) -> None:
    assert queue.desk.codes("operator", status="ToPayout") == [queue.to_pay]
    assert queue.desk.codes("operator", status="PayoutConfirming") == [queue.confirming]


def test_the_operator_reads_a_transaction_and_its_history(queue: Queue) -> None:
    shown = queue.desk.call("operator", "GET", f"{LIST}/{queue.to_pay}")["transaction"]
    assert (shown["transactionCode"], shown["status"]) == (queue.to_pay, "ToPayout")
    history = queue.desk.call("operator", "GET", f"{LIST}/{queue.blocked}/history")
    assert [event["type"] for event in history["events"]] == ["Initiated", "Blocked"]
    assert history["transaction"]["status"] == "BLOCKED"


def test_blocked_sells_and_late_payments_are_listed_to_resolve(queue: Queue) -> None:
    desk = queue.desk
    assert desk.codes("operator", status="BLOCKED") == [queue.blocked]
    assert desk.codes("operator", paidLate="true") == [queue.late]
    assert desk.codes("operator", status="CANCELLED", paidLate="false") == [queue.expired]
    assert set(desk.codes("operator", status="CANCELLED")) == {queue.late, queue.expired}
    assert queue.late not in desk.codes("operator", paidLate="false")
    assert desk.codes("operator", status="ToPayout", paidLate="true") == []


def test_at_an_instant_a_late_payment_is_one_only_once_it_was_seen(queue: Queue) -> None:
    desk, before = queue.desk, iso(queue.before_late_payment)
    assert desk.codes("operator", paidLate="true", asOf=before) == []
    assert set(desk.codes("operator", status="CANCELLED", paidLate="false", asOf=before)) == {
        queue.late,
        queue.expired,
        queue.refunding,  # paid late after then, and refunded since
    }
    now = iso(CLOCK.now())
    assert desk.codes("operator", paidLate="true", asOf=now) == [queue.late]
    assert desk.codes("operator", status="CANCELLED", paidLate="false", asOf=now) == [queue.expired]
    page = desk.call("auditor", "GET", f"{LIST}?paidLate=true&asOf={now}")
    assert page["total"] == 1 and page["records"][0]["blockchainTransactionId"] == f"late-{queue.late}"


def test_another_partners_clients_never_see_the_queue(queue: Queue) -> None:
    desk = queue.desk
    assert desk.codes("other operator", status="ToPayout") == []
    assert desk.codes("other operator", status="BLOCKED") == [queue.other_blocked]
    assert desk.codes("other broker", paidLate="true") == []
    assert queue.other_blocked not in desk.codes("operator", status="BLOCKED")
    for role in ("other operator", "other broker"):
        desk.call(role, "GET", f"{LIST}/{queue.to_pay}", status=404)
        desk.call(role, "GET", f"{LIST}/{queue.blocked}/history", status=404)
    desk.call("operator", "GET", f"{LIST}/{queue.other_blocked}", status=404)


def test_the_statuses_of_a_resolution_are_filters_as_soon_as_the_domain_has_them(queue: Queue) -> None:
    assert {"Refunding", "REFUNDED"} <= set(STATUSES)
    assert queue.desk.codes("operator", status="Refunding") == [queue.refunding]
    assert queue.desk.codes("operator", status="REFUNDED") == []
    assert queue.refunding not in queue.desk.codes("operator", paidLate="true")  # resolved: no longer waits
    assert queue.desk.codes("other operator", status="Refunding") == []


@pytest.mark.parametrize("value", ["maybe", "", "2"])
def test_a_paid_late_that_is_no_boolean_is_refused(queue: Queue, value: str) -> None:
    answer = queue.desk.call("operator", "GET", f"{LIST}?paidLate={value}", status=400)
    assert "paidLate" in answer["detail"]


# --- the console's payout queue ---------------------------------------------------------------------------


def console_page(client: InProcessClient, client_id: str, path: str) -> Any:
    """`path` of the console, signed in as `client_id` (and signed out after)."""
    form = {"client_id": client_id, "client_secret": client_secrets(client.var)[client_id]}
    signed_in = client.post(
        "/console/sign-in", data=form, headers={"Origin": DEFAULT_CONSOLE_ORIGIN}, follow_redirects=False
    )
    assert signed_in.status_code == 303, signed_in.text
    try:
        return client.get(path)
    finally:
        client.cookies.clear()


def section_of(page: str, key: str) -> dict[str, str]:
    """The sells a section of the payout queue shows: code -> status."""
    part = page.split(f'<section id="{key}"')[1].split("</section>")[0]
    return dict(re.findall(r'<tr class="queued" data-code="([^"]+)" data-status="([^"]+)"', part))


def to_act(page: str, code: str) -> str:
    """The row under a queued sell: the calls that move it on."""
    return page.split(f'<tr class="to-act" data-code="{code}"')[1].split("</tr>")[0]


def test_the_console_queue_shows_each_waiting_sell_with_the_call_that_moves_it_on(
    client: InProcessClient, queue: Queue
) -> None:
    answer = console_page(client, "demo-operator", "/console/payouts")
    assert answer.status_code == 200 and "script-src 'self'" in answer.headers["content-security-policy"]
    page = answer.text
    assert section_of(page, "to-pay-out") == {queue.to_pay: "ToPayout", queue.confirming: "PayoutConfirming"}
    assert section_of(page, "blocked") == {queue.blocked: "BLOCKED"}
    assert section_of(page, "paid-late") == {queue.late: "CANCELLED"}
    assert section_of(page, "refunding") == {queue.refunding: "Refunding"}
    assert queue.expired not in page and queue.other_blocked not in page
    for code in (queue.to_pay, queue.confirming, queue.blocked, queue.late):
        assert f'href="/console/transactions/{code}"' in page
    assert f"PUT {LIST}/{queue.to_pay}/payoutconfirming" in page
    assert f"PUT {LIST}/{queue.confirming}/payout" in page
    assert f"PUT {LIST}/{queue.confirming}/payoutconfirming" not in page
    blocked = to_act(page, queue.blocked)
    assert f"POST {LIST}/{queue.blocked}/resolution" in blocked and "AcceptReceived" in blocked
    late = to_act(page, queue.late)
    assert f"POST {LIST}/{queue.late}/resolution" in late and "AcceptReceived" not in late
    assert f"GET {LIST}?paidLate=true" in page
    refund = html.unescape(to_act(page, queue.refunding))
    assert "POST /chain/sendouts" in refund and f'"transactionCode": "{queue.refunding}"' in refund
    assert 'class="refund-amount"' in refund and 'class="refund-address">bc1' in refund
    received = page.split(f'data-code="{queue.blocked}"')[1].split("</tr>")[0]
    assert '<td class="amount received">0.00090000 BTC</td>' in received


def test_the_console_queue_opens_the_transactions_timeline_for_the_operator(
    client: InProcessClient, queue: Queue
) -> None:
    timeline = console_page(client, "demo-operator", f"/console/transactions/{queue.late}").text
    assert re.findall(r'data-type="([^"]+)"', timeline) == ["Initiated", "Cancelled", "PaidLate"]
    assert '<dd id="transaction-status">CANCELLED</dd>' in timeline


def test_another_partners_operator_sees_only_its_own_queue(client: InProcessClient, queue: Queue) -> None:
    page = console_page(client, "other-operator", "/console/payouts").text
    assert section_of(page, "blocked") == {queue.other_blocked: "BLOCKED"}
    assert section_of(page, "to-pay-out") == {} and section_of(page, "paid-late") == {}
    foreign = console_page(client, "other-operator", f"/console/transactions/{queue.blocked}")
    assert foreign.status_code == 404
