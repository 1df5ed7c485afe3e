"""The group committer keeps a partner's write position in the transaction of the partner's events, so a
write needs no statement of its own for read-your-writes; what it did not keep, the middleware keeps."""

from __future__ import annotations

import uuid

import psycopg

from application.store.positions import tracking_writes
from tests.databases import kept_position


def new_code() -> str:
    return f"kept-{uuid.uuid4().hex[:12]}"


def test_a_partners_write_position_is_kept_with_its_events(client, database_url):
    ledger = client.app.state.runtime.ledger
    with tracking_writes("demo") as written:
        ledger.register_customer("demo", new_code(), "Basic")
    assert written.position > 0
    assert written.kept == written.position
    assert not written.left_to_keep
    assert kept_position(database_url, "demo") == written.position


def test_a_kept_position_never_goes_back(client, database_url):
    ledger = client.app.state.runtime.ledger
    with tracking_writes("other") as first:
        ledger.register_customer("other", new_code(), "Basic")
    with tracking_writes("demo") as later:
        ledger.register_customer("demo", new_code(), "Basic")
    assert later.position > first.position
    assert kept_position(database_url, "other") >= first.position
    assert kept_position(database_url, "demo") >= later.position


def test_a_write_without_a_partner_is_left_for_the_interface_to_keep(client):
    ledger = client.app.state.runtime.ledger
    with tracking_writes() as written:
        ledger.register_customer("demo", new_code(), "Basic")
    assert written.position > 0
    assert written.kept == 0
    assert written.left_to_keep


def test_a_write_over_http_keeps_its_position_before_its_answer(client, broker, database_url):
    answer = client.post(
        "/customer", json={"customerCode": new_code(), "trustLevel": "Basic"}, headers=broker
    )
    assert answer.status_code == 201, answer.text
    with psycopg.connect(database_url) as conn:
        head = conn.execute("SELECT max(notification_id) FROM ledger.ledger_events").fetchone()[0]
    assert kept_position(database_url, "demo") == head
