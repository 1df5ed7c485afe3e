"""The events feed (`GET /events`) on the real app in-process, its projections running, on a database of its
own: a partner's status changes in log order with their cursors, bodies as the endpoints show them, cursors
that read on exactly, the query's refusals, long polling that answers soon after a change and holds no
connection and no thread while it waits, and an index that a rebuild writes again under the same keys."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from decimal import Decimal
from typing import Any

import pytest
from eventsourcing.domain import Aggregate, event
from psycopg.sql import SQL

from interface.events.cursors import cursor_of
from interface.events.reading import status_changes
from projections.base.runner import open_view, replay
from projections.events_feed import EVENTS_FEED
from tests.e2e.support import AddressSource, Customer, buy_body, deposit_report, sell_body, unique_code
from tests.in_process import InProcessClient, RoleCalls, in_process_app

client = in_process_app(projections=True, own_database="broker_events_feed")
WAKE_WITHIN = 3.0  # seconds from a change to the waiting request's answer, at most (typically 0.1)


class Desk(RoleCalls):
    def customer(self, addresses: AddressSource, role: str = "broker") -> Customer:
        code = unique_code("feed")
        self.call(role, "POST", "/customer", {"customerCode": code, "trustLevel": "Basic"})
        self.call(role, "PUT", f"/customer/{code}", {"status": "ACTIVE"})
        address = addresses()
        account = self.call(role, "POST", f"/customer/{code}/accounts", {"customerCryptoAddress": address})
        return Customer(code, account["accountCode"], address, account["dcReceiveAddress"])

    def events(self, query: str = "", role: str = "broker", status: int | None = None) -> Any:
        return self.call(role, "GET", f"/events{query}", status=status)

    def all_events(self, after: str | None = None, limit: int = 500, role: str = "broker") -> list[Any]:
        """Every change after `after`, page by page until `hasMore` is false."""
        found: list[Any] = []
        while True:
            query = f"?limit={limit}" + (f"&after={after}" if after else "")
            page = self.events(query, role)
            found += page["data"]
            after = page["nextCursor"]
            if not page["hasMore"]:
                return found

    def head(self, role: str = "broker") -> str:
        page = self.events("?limit=500", role)
        while page["hasMore"]:
            page = self.events(f"?limit=500&after={page['nextCursor']}", role)
        return page["nextCursor"]


@pytest.fixture(scope="module")
def desk(client: InProcessClient) -> Desk:
    names = {"broker": "demo-broker", "operator": "demo-operator", "auditor": "demo-auditor"}
    names |= {"other": "other-broker"}
    return Desk(client, {role: client.headers_of(name) for role, name in names.items()})


@pytest.fixture(scope="module")
def history(desk: Desk) -> dict[str, Any]:
    """One customer, a buy staged, committed and sent out, a buy created at once (Sending from its first
    event), a sell paid and confirmed, paid out."""
    addresses = AddressSource()
    alice = desk.customer(addresses)
    staged = desk.call("broker", "POST", "/brokerbuy", buy_body(alice, 100, stage=True))["transaction"]
    desk.call("broker", "POST", f"/transactions/custodian/{staged['transactionCode']}/commit", {})
    sendout = {"transactionCode": staged["transactionCode"], "txId": "out-1", "confirmations": 1}
    desk.call("operator", "POST", "/chain/sendouts", sendout)  # too few confirmations: no change of status
    desk.call("operator", "POST", "/chain/sendouts", {**sendout, "confirmations": 2})
    sent = desk.call("broker", "POST", "/brokerbuy", buy_body(alice, 50))["transaction"]
    sold = desk.call(
        "broker", "POST", "/paymentrequest/brokersell", sell_body(alice, cryptoAmount=Decimal("0.001"))
    )
    sold = sold["transaction"]
    desk.call("operator", "POST", "/chain/deposits", deposit_report(sold, 2))
    desk.call("operator", "PUT", f"/transactions/custodian/{sold['transactionCode']}/payout", {})
    return {"alice": alice, "staged": staged, "sent": sent, "sold": sold}


def changes(found: list[Any]) -> list[tuple[str, str, str]]:
    """(type, code, status) of each change."""
    shown = []
    for item in found:
        subject = item.get("transaction") or item["customer"]
        code = subject.get("transactionCode") or subject["customerCode"]
        shown.append((item["type"], code, subject["status"]))
    return shown


def test_the_feed_shows_each_status_change_once_in_log_order(desk, history):
    found = desk.all_events()
    alice, staged, sent, sold = (history[k] for k in ("alice", "staged", "sent", "sold"))
    customer, tx = "customer.status_changed", "transaction.status_changed"
    assert changes(found) == [
        (customer, alice.code, "NEW"),
        (customer, alice.code, "ACTIVE"),
        (tx, staged["transactionCode"], "Staged"),
        (tx, staged["transactionCode"], "Sending"),
        (tx, staged["transactionCode"], "COMPLETED"),
        (tx, sent["transactionCode"], "Sending"),  # its Committed rides with its creation: no change
        (tx, sold["transactionCode"], "Initiated"),
        (tx, sold["transactionCode"], "ToPayout"),
        (tx, sold["transactionCode"], "COMPLETED"),
    ]
    cursors = [item["cursor"] for item in found]
    assert len(set(cursors)) == len(cursors) and len({item["id"] for item in found}) == len(found)
    assert [item["id"][:4] for item in found] == ["evt_"] * len(found)
    assert set(found[0]) == {"id", "cursor", "type", "created", "customer"}
    assert found[0]["customer"]["trustLevel"] == "Basic" and "accounts" not in found[0]["customer"]


def test_a_change_carries_the_transaction_as_it_stood_then_as_the_endpoints_show_it(desk, history):
    found = [item for item in desk.all_events() if item["type"] == "transaction.status_changed"]
    code = history["sold"]["transactionCode"]
    last = [item for item in found if item["transaction"]["transactionCode"] == code]
    now = desk.call("broker", "GET", f"/transactions/custodian/{code}")["transaction"]
    assert last[-1]["transaction"] == now
    assert last[-1]["created"] == now["updated"]
    first = desk.call("broker", "GET", f"/transactions/custodian/{code}/history?asOf={last[0]['created']}")
    assert last[0]["transaction"] == first["transaction"]  # Initiated, before its payment


def test_a_cursor_reads_on_after_its_change_and_pages_add_up_to_the_whole_feed(desk, history):
    whole = desk.all_events()
    one_by_one = desk.all_events(limit=1)
    assert one_by_one == whole
    middle = whole[3]["cursor"]
    assert desk.all_events(after=middle) == whole[4:]
    page = desk.events(f"?limit=2&after={whole[0]['cursor']}")
    assert page["data"] == whole[1:3] and page["hasMore"] is True
    assert page["nextCursor"] == whole[2]["cursor"]


def test_the_end_of_the_feed_says_no_more_and_keeps_the_cursor(desk, history):
    head = desk.head()
    page = desk.events(f"?after={head}")
    assert page == {"data": [], "nextCursor": head, "hasMore": False}


def test_types_narrow_the_feed_to_transactions_or_customers(desk, history):
    whole = desk.all_events()
    customers = desk.events("?types=customer.status_changed&limit=500")["data"]
    transactions = desk.events("?types=transaction.status_changed&limit=500")["data"]
    assert customers == [item for item in whole if item["type"] == "customer.status_changed"]
    assert transactions == [item for item in whole if item["type"] == "transaction.status_changed"]
    both = desk.events("?types=customer.status_changed,transaction.status_changed&limit=500")["data"]
    assert both == whole


def test_the_auditor_reads_the_feed_and_another_partner_sees_none_of_it(desk, history):
    assert desk.all_events(role="auditor") == desk.all_events()
    other = desk.all_events(role="other")
    codes = {code for _, code, _ in changes(desk.all_events())}
    assert not codes & {code for _, code, _ in changes(other)}
    desk.events(role="operator", status=403)


@pytest.mark.parametrize(
    ("query", "words"),
    [
        ("?after=nope", "after='nope' is not a cursor of this feed"),
        ("?after=ZXYxOgAAAAAAAAA", "after='ZXYxOgAAAAAAAAA' is not a cursor"),  # one character short
        ("?types=transaction.created", "must be a comma list of transaction.status_changed, customer"),
        ("?types=", "'' is none of them"),
    ],
)
def test_a_malformed_cursor_or_an_unknown_type_is_refused_saying_what_is_expected(desk, query, words):
    problem = desk.events(query, status=400)
    assert problem["code"] == "malformed_request"
    assert words in problem["detail"]


@pytest.mark.parametrize("query", ["?limit=0", "?limit=501", "?wait=31", "?wait=-1"])
def test_limit_and_wait_are_bounded(desk, query):
    desk.events(query, status=400)


def test_a_cursor_past_the_head_of_the_log_is_refused(desk, history):
    problem = desk.events(f"?after={cursor_of(2**59)}", status=409)
    assert problem["code"] == "cursor_ahead_of_log"


def test_a_waiting_request_answers_soon_after_a_change_comes(desk, history):
    head = desk.head()
    answered: dict[str, Any] = {}

    def wait_for_news() -> None:
        answered["page"] = desk.events(f"?after={head}&wait=20")
        answered["at"] = time.monotonic()

    waiting = threading.Thread(target=wait_for_news)
    waiting.start()
    time.sleep(1.0)
    assert waiting.is_alive()  # nothing happened yet: it waits
    code = unique_code("late")
    changed_at = time.monotonic()
    desk.call("broker", "POST", "/customer", {"customerCode": code, "trustLevel": "Basic"})
    waiting.join(timeout=20)
    assert answered["at"] - changed_at < WAKE_WITHIN
    assert changes(answered["page"]["data"]) == [("customer.status_changed", code, "NEW")]


def test_one_change_wakes_every_request_of_its_partner_and_none_of_another(desk, history):
    head, other_head = desk.head(), desk.head(role="other")
    with ThreadPoolExecutor(max_workers=9) as pool:
        mine = [pool.submit(desk.events, f"?after={head}&wait=20") for _ in range(8)]
        theirs = pool.submit(desk.events, f"?after={other_head}&wait=8", "other")
        time.sleep(1.0)
        code = unique_code("many")
        changed_at = time.monotonic()
        desk.call("broker", "POST", "/customer", {"customerCode": code, "trustLevel": "Basic"})
        pages = [future.result() for future in mine]
        woken_in = time.monotonic() - changed_at
        assert not theirs.done()  # another partner's change is no news to it
        assert theirs.result() == {"data": [], "nextCursor": other_head, "hasMore": False}
    assert woken_in < WAKE_WITHIN
    assert all(changes(page["data"]) == [("customer.status_changed", code, "NEW")] for page in pages)


def test_a_wait_ends_empty_when_nothing_comes(desk, history):
    head = desk.head(role="other")
    started = time.monotonic()
    page = desk.events(f"?after={head}&wait=1", role="other")
    assert 0.9 < time.monotonic() - started < 1.0 + WAKE_WITHIN
    assert page == {"data": [], "nextCursor": head, "hasMore": False}


def checked_out(pools: dict[str, Any]) -> dict[str, int]:
    """Connections each pool has lent now."""
    lent = {}
    for name, pool in pools.items():
        stats = pool.get_stats()
        lent[name] = stats.get("pool_size", 0) - stats.get("pool_available", 0)
    return lent


def test_waiting_requests_hold_no_connection_and_no_thread(client, desk, history):
    """More waiting requests than the app has threads for use cases (32) and connections (7): they wait side
    by side, while the pools lend nothing but, for a moment now and then, the one connection of the waker
    and of the callbacks' worker (which polls its outbox whether anyone waits or not)."""
    runtime = client.app.state["runtime"]
    head = desk.head(role="other")
    waiters = 40
    samples: list[dict[str, int]] = []
    with ThreadPoolExecutor(max_workers=waiters) as pool:
        started = time.monotonic()
        futures = [pool.submit(desk.events, f"?after={head}&wait=3", "other") for _ in range(waiters)]
        time.sleep(1.0)
        while time.monotonic() - started < 2.5:
            samples.append(checked_out(runtime.pools()))
            time.sleep(0.02)
        assert runtime.events_feed.waker.waiting == waiters
        pages = [future.result() for future in futures]
        took = time.monotonic() - started
    assert all(page["data"] == [] for page in pages)
    assert took < 3 + WAKE_WITHIN  # none waited for another's thread
    assert len(samples) > 20
    # at most, for a moment, the waker's one connection (read models) and the callbacks worker's poll (api)
    assert all(max(sample.values()) <= 1 and sum(sample.values()) <= 2 for sample in samples), samples
    assert sum(sum(sample.values()) for sample in samples) < len(samples) / 2, samples


def test_the_feed_shows_a_status_change_of_any_event_the_aggregate_records():
    """Which events change a status is the aggregate's knowledge: an aggregate the feed has never heard of
    shows its creation and each event that moves its status, and not the others."""

    class Parcel(Aggregate):
        def __init__(self) -> None:
            self.status = "Packed"

        @event("Weighed")
        def weigh(self) -> None:
            self.weight = 1

        @event("Shipped")
        def ship(self) -> None:
            self.status = "Shipped"

    parcel = Parcel()
    parcel.weigh()
    parcel.ship()
    events = parcel.collect_events()
    shown = [(e.originator_version, s.status) for e, s in status_changes(events, {1: 0, 2: 0, 3: 0})]
    assert shown == [(1, "Packed"), (3, "Shipped")]
    assert [e.originator_version for e, _ in status_changes(events, {2: 0})] == []


def test_a_rebuilt_index_holds_the_same_rows_under_the_same_positions(client, desk, history):
    live = open_view(client.database_url, EVENTS_FEED)
    rebuilt = open_view(client.database_url, EVENTS_FEED, schema="events_feed_rebuilt")
    runtime = client.app.state["runtime"]
    try:
        stop = live.position()
        replay(runtime.ledger, EVENTS_FEED, rebuilt, stop_at=stop)
        statement = "SELECT * FROM {} WHERE notification_id <= %s ORDER BY notification_id"
        with live.datastore.transaction(commit=False) as curs:
            before = curs.execute(SQL(statement).format(live.table("events_feed")), (stop,)).fetchall()
        with rebuilt.datastore.transaction(commit=False) as curs:
            after = curs.execute(SQL(statement).format(rebuilt.table("events_feed")), (stop,)).fetchall()
        assert before and [dict(row) for row in after] == [dict(row) for row in before]
    finally:
        live.datastore.close()
        rebuilt.datastore.close()
