"""Read-your-writes by position: a write keeps its partner's last notification id before its answer is sent,
and a read waits until the read models have passed that position, not for the whole event log."""

from __future__ import annotations

import uuid
from typing import Any

import psycopg

from interface.shared.transaction_reading import Reader
from tests.databases import kept_position


def log_head(database_url: str) -> int:
    with psycopg.connect(database_url) as conn:
        return conn.execute("SELECT max(notification_id) FROM ledger.ledger_events").fetchone()[0]


def test_a_write_keeps_its_partners_position_before_its_answer_is_sent(client, database_url):
    headers = client.headers_of("demo-broker")
    answer = client.post(
        "/customer",
        json={"customerCode": f"ryw-{uuid.uuid4().hex[:12]}", "trustLevel": "Basic"},
        headers=headers,
    )
    assert answer.status_code == 201, answer.text
    assert kept_position(database_url, "demo") == log_head(database_url)


def test_a_refused_write_keeps_no_position(client, database_url):
    before = kept_position(database_url, "other")
    headers = client.headers_of("other-broker")
    answer = client.post("/customer", json={"trustLevel": "Basic"}, headers=headers)
    assert answer.status_code == 422
    assert kept_position(database_url, "other") == before


class FakeView:
    """A read model at `position` that records the position each read asked for (a read looks at once,
    then may wait for the same position)."""

    def __init__(self, position: int) -> None:
        self.position = position
        self.waited_for: list[int] = []
        self.datastore = self

    def get_connection(self) -> Any:
        return self

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: Any) -> None:
        return None

    def caught_up(self, notification_id: int, timeout: float) -> bool:
        if timeout == 0.0:  # the read's first look
            self.waited_for.append(notification_id)
        return self.position >= notification_id


class KeptPositions:
    def __init__(self, **positions: int) -> None:
        self.positions = positions

    def last(self, conn: Any, partner: str) -> int:
        return self.positions.get(partner, 0)


def test_a_read_waits_for_its_partners_last_write_and_not_for_other_partners():
    view = FakeView(position=10)
    positions = KeptPositions(demo=42, other=7)
    reader = Reader(ledger=None, view=view, positions=positions, failing=lambda: False)  # type: ignore[arg-type]
    assert reader.catch_up("demo") is False  # behind demo's write at 42: answered from what is there
    assert reader.catch_up("other") is True
    assert reader.catch_up("newcomer") is True  # has written nothing: waits for nothing
    assert view.waited_for == [42, 7]
