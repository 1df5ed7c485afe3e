"""Delivering the outbox to real HTTP receivers on 127.0.0.1 (allow-listed in these settings): signed bodies,
order per transaction, retries, 410, giving up, leases, and the SSRF checks at send time."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from application.ledger import Ledger
from application.use_cases import UseCases
from interface.shared import transaction_presenters as presenters
from interface.transactions.callback_bodies import ENCODER
from projections.callbacks.delivery import DeliveryConfig
from projections.callbacks.outbox import DeliveryStore
from projections.callbacks.projection import CallbackOutbox
from projections.callbacks.urls import CallbackUrlPolicy, SystemResolver
from tests.projections.callbacks.support import (
    FAST,
    SECRET,
    Trades,
    drain,
    listing,
    project,
)
from tests.receivers import Listener, Receiver, flaky, receiving


def check_in_order(receiver: Receiver, store: DeliveryStore, codes: list[str]) -> None:
    """Every delivery reached the receiver (2xx), and no delivery of a transaction arrived before the one
    before it had been delivered."""
    sequence = {record.event_id: (code, record.sequence) for code in codes for record in listing(store, code)}
    delivered_up_to: dict[str, int] = dict.fromkeys(codes, 0)
    for received in receiver.snapshot():
        code, number = sequence[received.event_id]
        assert number <= delivered_up_to[code] + 1, f"{code}: #{number} before #{delivered_up_to[code] + 1}"
        if received.ok:
            delivered_up_to[code] = max(delivered_up_to[code], number)
    assert delivered_up_to == {code: len(listing(store, code)) for code in codes}
    assert receiver.delivered_ids() == set(sequence)


def test_each_status_change_is_delivered_signed_and_in_order(
    store_ledger: Ledger,
    store_use_cases: UseCases,
    addresses: Any,
    outbox: CallbackOutbox,
    store: DeliveryStore,
    make_worker: Any,
) -> None:
    with receiving(Receiver()) as receiver:
        trades = Trades(store_use_cases, addresses)
        buys = [trades.buy(receiver.url) for _ in range(3)]
        for buy in buys:
            trades.complete(buy)
        project(store_ledger, outbox)
        codes = [buy.code for buy in buys]
        drain(make_worker(), store, codes)
    check_in_order(receiver, store, codes)
    for received in receiver.snapshot():
        body = received.verified(SECRET)
        assert received.headers["Webhook-Id"] == body["id"] == received.event_id
        assert body["type"] == "transaction.status_changed"
        assert set(body) == {"id", "type", "created", "transaction"}
        assert received.headers["Content-Type"] == "application/json"
    final = store_ledger.store.transaction("demo", buys[0].code)
    last = [
        r.payload for r in receiver.snapshot() if r.payload["transaction"]["transactionCode"] == final.code
    ]
    assert [p["transaction"]["status"] for p in last] == ["Staged", "Sending", "COMPLETED"]
    expected = json.loads(ENCODER.encode(presenters.transaction(store_ledger.settings, final)))
    assert last[-1]["transaction"] == expected["transaction"]


def test_a_failing_receiver_gets_every_event_again_until_it_takes_it(
    store_ledger: Ledger,
    store_use_cases: UseCases,
    addresses: Any,
    outbox: CallbackOutbox,
    store: DeliveryStore,
    make_worker: Any,
) -> None:
    with receiving(Receiver(lambda event_id, seen: 500 if seen < 2 else None)) as receiver:
        trades = Trades(store_use_cases, addresses)
        buy = trades.buy(receiver.url)
        trades.complete(buy)
        project(store_ledger, outbox)
        drain(make_worker(), store, [buy.code])
    check_in_order(receiver, store, [buy.code])
    for record in listing(store, buy.code):
        assert record.status == "delivered" and record.response_code == 204
        assert [(a.number, a.outcome, a.response_code) for a in record.attempts] == [
            (1, "failed", 500),
            (2, "failed", 500),
            (3, "delivered", 204),
        ]
        assert record.attempts[0].error == "HTTP 500"


def test_a_410_stops_the_endpoint_for_every_later_delivery(
    store_ledger: Ledger,
    store_use_cases: UseCases,
    addresses: Any,
    outbox: CallbackOutbox,
    store: DeliveryStore,
    make_worker: Any,
) -> None:
    with receiving(Receiver(lambda event_id, seen: 410)) as receiver:
        trades = Trades(store_use_cases, addresses)
        first, second = trades.buy(receiver.url), trades.buy(receiver.url)
        project(store_ledger, outbox)
        drain(make_worker(), store, [first.code, second.code])
    assert len(receiver.snapshot()) == 1
    records = listing(store, first.code) + listing(store, second.code)
    assert {record.status for record in records} == {"stopped"}
    assert sum(len(record.attempts) for record in records) == 1


def test_a_delivery_is_given_up_after_the_retry_window_and_the_next_one_goes(
    store_ledger: Ledger,
    store_use_cases: UseCases,
    addresses: Any,
    outbox: CallbackOutbox,
    store: DeliveryStore,
    make_worker: Any,
) -> None:
    first_event: list[str] = []

    def answer(event_id: str, seen: int) -> int | None:
        first_event[:] = first_event or [event_id]
        return 503 if event_id == first_event[0] else None

    config = DeliveryConfig(**{**vars(FAST), "retry_window_seconds": 0.3})
    with receiving(Receiver(answer)) as receiver:
        buy = Trades(store_use_cases, addresses).buy(receiver.url)
        project(store_ledger, outbox)
        drain(make_worker(config), store, [buy.code])
    staged, sending = listing(store, buy.code)
    assert staged.status == "failed" and len(staged.attempts) >= 2 and staged.finished_at is not None
    assert all(attempt.response_code == 503 for attempt in staged.attempts)
    assert sending.status == "delivered"


def test_a_delivery_leased_by_a_worker_that_died_is_sent_once_the_lease_runs_out(
    store_ledger: Ledger,
    store_use_cases: UseCases,
    addresses: Any,
    outbox: CallbackOutbox,
    store: DeliveryStore,
    make_worker: Any,
) -> None:
    with receiving(Receiver()) as receiver:
        buy = Trades(store_use_cases, addresses).buy(receiver.url)
        project(store_ledger, outbox)
        dead = store.claim(lease_seconds=0.5)  # claimed, then its worker "dies" before sending
        assert dead is not None and dead.sequence == 1
        assert store.claim(lease_seconds=0.5) is None  # #2 waits for #1; #1 is leased
        time.sleep(0.6)
        drain(make_worker(), store, [buy.code])
    check_in_order(receiver, store, [buy.code])
    assert len(receiver.snapshot()) == 2


def test_several_workers_deliver_a_flaky_receivers_events_in_order(
    store_ledger: Ledger,
    store_use_cases: UseCases,
    addresses: Any,
    outbox: CallbackOutbox,
    store: DeliveryStore,
    make_worker: Any,
) -> None:
    with receiving(Receiver(flaky(fail_rate=0.3, stall_rate=0.05), stall_seconds=0.7)) as receiver:
        trades = Trades(store_use_cases, addresses)
        buys = [trades.buy(receiver.url) for _ in range(8)]
        for buy in buys:
            trades.complete(buy)
        project(store_ledger, outbox)
        codes = [buy.code for buy in buys]
        for worker in (make_worker(), make_worker()):
            worker.start()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and any(
            r.status == "pending" for code in codes for r in listing(store, code)
        ):
            time.sleep(0.1)
    check_in_order(receiver, store, codes)
    assert any(not item.ok for item in receiver.snapshot())  # the receiver did fail some


def test_a_host_that_resolves_to_loopback_at_send_time_gets_no_connection(
    store_ledger: Ledger,
    store_use_cases: UseCases,
    addresses: Any,
    outbox: CallbackOutbox,
    store: DeliveryStore,
    make_worker: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """DNS rebinding: the URL's host is public when the buy is created and 127.0.0.1 when it is sent."""
    answers = {"hooks.partner.example": ["93.184.215.14"]}
    monkeypatch.setattr(SystemResolver, "__call__", lambda self, host, port: answers[host])
    with Listener() as listener:
        buy = Trades(store_use_cases, addresses).buy(f"https://hooks.partner.example:{listener.port}/cb")
        project(store_ledger, outbox)
        answers["hooks.partner.example"] = ["127.0.0.1"]
        worker = make_worker(policy=CallbackUrlPolicy([]))
        assert worker.deliver_next()
        time.sleep(0.2)
    assert listener.connections == 0
    attempt = listing(store, buy.code)[0].attempts[0]
    assert attempt.outcome == "failed" and "non-public address 127.0.0.1" in (attempt.error or "")


def test_a_redirect_is_not_followed(
    store_ledger: Ledger,
    store_use_cases: UseCases,
    addresses: Any,
    outbox: CallbackOutbox,
    store: DeliveryStore,
    make_worker: Any,
) -> None:
    with Listener() as target:
        redirect = {"Location": f"http://127.0.0.1:{target.port}/elsewhere"}
        with receiving(Receiver(lambda event_id, seen: 307, headers=redirect)) as receiver:
            buy = Trades(store_use_cases, addresses).buy(receiver.url)
            project(store_ledger, outbox)
            assert make_worker().deliver_next()
    assert target.connections == 0 and len(receiver.snapshot()) == 1
    attempt = listing(store, buy.code)[0].attempts[0]
    assert (attempt.response_code, attempt.error) == (307, "HTTP 307 (redirects are not followed)")


def test_a_stalling_receiver_costs_one_timeout(
    store_ledger: Ledger,
    store_use_cases: UseCases,
    addresses: Any,
    outbox: CallbackOutbox,
    store: DeliveryStore,
    make_worker: Any,
) -> None:
    with receiving(Receiver(lambda event_id, seen: -1, stall_seconds=2.0)) as receiver:
        buy = Trades(store_use_cases, addresses).buy(receiver.url)
        project(store_ledger, outbox)
        started = time.monotonic()
        assert make_worker().deliver_next()
        took = time.monotonic() - started
    assert took < FAST.timeout_seconds + 1.0
    attempt = listing(store, buy.code)[0].attempts[0]
    assert (
        attempt.outcome == "failed" and attempt.error and attempt.error.startswith("no answer within 0.5 s")
    )


def test_the_sender_threads_stop_promptly(make_worker: Any) -> None:
    worker = make_worker()
    worker.start()
    started = time.monotonic()
    worker.stop()
    assert time.monotonic() - started < 1.5
    assert not any(thread.is_alive() for thread in worker._threads)
