"""The callbacks outbox projection: a delivery per status change of a transaction with a callback URL, with a
stable id and the transaction's state as it stood then; none without a URL; a rebuild sends nothing again."""

from __future__ import annotations

from typing import Any
from uuid import UUID

import psycopg
from eventsourcing.persistence import Tracking
from psycopg.rows import dict_row

from application.commands import BuyRequest
from application.ledger import Ledger
from application.settings import Settings
from application.use_cases import UseCases
from projections.callbacks.projection import CallbackOutbox, event_id
from projections.callbacks.snapshots import StoredState, restore, store
from tests.projections.callbacks.support import (
    SELL_METHOD_HOOK,
    Trades,
    project,
)
from tests.projections.scenario import populate

HOOK = "http://127.0.0.1:9/own-hook"


def outbox_rows(database: str) -> list[dict[str, Any]]:
    with psycopg.connect(database, row_factory=dict_row) as conn:
        return conn.execute(
            "SELECT * FROM read.callback_outbox ORDER BY transaction_code, sequence"
        ).fetchall()


def status_changes(ledger: Ledger, transaction_id: UUID) -> list[tuple[int, str]]:
    """(version, status) of each event that changed the transaction's status, from the event store."""
    changes, transaction = [], None
    for stored in ledger.recorder.select_events(transaction_id):
        event = ledger.mapper.to_domain_event(stored)
        before = transaction.status if transaction else None
        transaction = event.mutate(transaction)
        if transaction.status != before:
            changes.append((transaction.version, str(transaction.status)))
    return changes


def test_every_status_change_of_a_transaction_with_a_url_becomes_one_delivery(
    store_ledger: Ledger,
    store_use_cases: UseCases,
    clock: Any,
    addresses: Any,
    outbox: CallbackOutbox,
    fresh_database: str,
) -> None:
    """Every sell of the scenario has the sell method's URL; its buys have none (and get no delivery)."""
    done = populate(store_use_cases, clock, addresses)
    project(store_ledger, outbox)
    rows = outbox_rows(fresh_database)
    by_code: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        by_code.setdefault(row["transaction_code"], []).append(row)
    sells = [
        store_ledger.store.transaction(partner, code)
        for partner, code in done.transactions
        if store_ledger.store.transaction(partner, code).type == "BROKERSELL"
    ]
    assert set(by_code) == {sell.code for sell in sells}
    for sell in sells:
        deliveries = by_code[sell.code]
        expected = status_changes(store_ledger, sell.id)
        assert [(row["version"], row["transaction_status"]) for row in deliveries] == expected
        assert [row["sequence"] for row in deliveries] == list(range(1, len(expected) + 1))
        assert all(row["event_id"] == event_id(sell.id, row["version"]) for row in deliveries)
        assert all(row["url"] == SELL_METHOD_HOOK and row["status"] == "pending" for row in deliveries)
        assert all(row["partner"] == sell.order.partner for row in deliveries)


def test_a_buy_created_without_stage_is_first_delivered_as_sending(
    store_ledger: Ledger,
    store_use_cases: UseCases,
    addresses: Any,
    outbox: CallbackOutbox,
    fresh_database: str,
) -> None:
    """Its Staged and Committed are one recording; its Staged says so, so the outbox (replayed or not)
    never has a Staged delivery a platform could try to commit on."""
    trades = Trades(store_use_cases, addresses)
    request = trades.buy(HOOK, stage=True).order  # a customer and account to buy for
    buy = store_use_cases.buys.create("demo", _request_of(request), stage=False)
    trades.complete(buy)
    project(store_ledger, outbox)
    rows = [row for row in outbox_rows(fresh_database) if row["transaction_code"] == buy.code]
    assert [(row["sequence"], row["transaction_status"]) for row in rows] == [
        (1, "Sending"),
        (2, "COMPLETED"),
    ]
    first = restore(
        StoredState(rows[0]["transaction_id"], rows[0]["version"], rows[0]["topic"], rows[0]["state"])
    )
    assert str(first.status) == "Sending"


def _request_of(order: Any) -> BuyRequest:
    return BuyRequest(
        customer_code=order.customer_code,
        currency=order.currency,
        crypto=order.crypto,
        fiat_value=order.quote.requested_fiat,
        destination_address=order.destination_address,
        payment_method=order.payment_method,
        callback_url=HOOK,
    )


def test_a_delivery_keeps_the_transaction_as_it_stood_after_its_event(
    store_ledger: Ledger,
    store_use_cases: UseCases,
    addresses: Any,
    outbox: CallbackOutbox,
    fresh_database: str,
) -> None:
    trades = Trades(store_use_cases, addresses)
    buy = trades.buy(HOOK)
    trades.complete(buy)
    project(store_ledger, outbox)
    rows = outbox_rows(fresh_database)
    assert [row["transaction_status"] for row in rows] == ["Staged", "Sending", "COMPLETED"]
    assert all(row["url"] == HOOK for row in rows)  # its own URL (the buy method has none)
    for row in rows:
        state = restore(StoredState(row["transaction_id"], row["version"], row["topic"], row["state"]))
        assert str(state.status) == row["transaction_status"] and state.version == row["version"]
    final = store_ledger.store.transaction("demo", buy.code)
    last = rows[-1]
    restored = restore(StoredState(last["transaction_id"], last["version"], last["topic"], last["state"]))
    assert vars(restored) == {**vars(final), "_pending_events": []}
    assert last["created"] == final.updated == restored.updated


def test_a_transaction_without_a_url_has_no_delivery(
    store_ledger: Ledger,
    store_use_cases: UseCases,
    addresses: Any,
    outbox: CallbackOutbox,
    fresh_database: str,
) -> None:
    trades = Trades(store_use_cases, addresses)
    trades.complete(trades.buy(None))
    project(store_ledger, outbox)
    assert outbox_rows(fresh_database) == []


def kept_states(database: str) -> dict[str, dict[str, Any]]:
    with psycopg.connect(database, row_factory=dict_row) as conn:
        rows = conn.execute("SELECT * FROM read.callback_transactions").fetchall()
    return {row["transaction_code"]: row for row in rows}


def test_a_transaction_without_a_url_is_kept_only_as_a_marker_through_all_its_events(
    store_ledger: Ledger,
    store_use_cases: UseCases,
    addresses: Any,
    outbox: CallbackOutbox,
    fresh_database: str,
) -> None:
    trades = Trades(store_use_cases, addresses)
    silent, hooked = trades.buy(None), trades.buy(HOOK)
    project(store_ledger, outbox)
    trades.complete(silent)  # its later events, one projection batch after its first
    trades.complete(hooked)
    project(store_ledger, outbox)
    kept = kept_states(fresh_database)
    assert (bytes(kept[silent.code]["state"]), kept[silent.code]["sequence"]) == (b"", 0)
    assert kept[silent.code]["status"] == "no callback URL"
    final = store_ledger.store.transaction("demo", hooked.code)
    restored = restore(
        StoredState(
            final.id, kept[hooked.code]["version"], kept[hooked.code]["topic"], kept[hooked.code]["state"]
        )
    )
    assert restored.status == final.status and kept[hooked.code]["version"] == final.version
    assert {row["transaction_code"] for row in outbox_rows(fresh_database)} == {hooked.code}


def test_a_transaction_without_a_url_kept_in_full_before_goes_on_without_a_delivery(
    store_ledger: Ledger,
    store_use_cases: UseCases,
    addresses: Any,
    outbox: CallbackOutbox,
    fresh_database: str,
) -> None:
    """A store projected before the marker existed holds such a transaction's whole state: its later events
    move that state on as before, and still deliver nothing."""
    trades = Trades(store_use_cases, addresses)
    buy = trades.buy(None)
    transaction = store_ledger.store.transaction("demo", buy.code)
    stored = store(transaction)
    outbox.insert_tracking(Tracking("Ledger", store_ledger.recorder.max_notification_id()))
    with psycopg.connect(fresh_database) as conn:
        conn.execute(
            "INSERT INTO read.callback_transactions VALUES (%s, 'demo', %s, %s, %s, %s, %s, 0)",
            (transaction.id, buy.code, stored.version, stored.topic, stored.state, str(transaction.status)),
        )
    trades.complete(buy)
    project(store_ledger, outbox)
    kept = kept_states(fresh_database)[buy.code]
    assert kept["version"] == store_ledger.store.transaction("demo", buy.code).version
    assert outbox_rows(fresh_database) == []


def test_a_rebuild_leaves_the_outbox_and_its_delivery_state_as_they_were(
    store_ledger: Ledger,
    store_use_cases: UseCases,
    addresses: Any,
    outbox: CallbackOutbox,
    fresh_database: str,
) -> None:
    trades = Trades(store_use_cases, addresses)
    trades.complete(trades.buy(HOOK))
    project(store_ledger, outbox)
    with psycopg.connect(fresh_database) as conn:
        conn.execute("UPDATE read.callback_outbox SET status = 'delivered', attempts = 1 WHERE sequence = 1")
    before = outbox_rows(fresh_database)
    outbox.reset()
    assert outbox.position() == 0
    project(store_ledger, outbox)
    assert outbox_rows(fresh_database) == before
    later = trades.buy(HOOK)
    project(store_ledger, outbox)
    assert [
        row["sequence"] for row in outbox_rows(fresh_database) if row["transaction_code"] == later.code
    ] == [
        1,
        2,
    ]


def test_the_demo_settings_fixture_is_the_callback_one(settings: Settings) -> None:
    assert "127.0.0.1" in settings.callback_http_hosts
