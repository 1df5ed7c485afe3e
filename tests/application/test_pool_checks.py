"""Pooled connections are checked before a loan only when they may have gone stale: a busy pool pays no
round trip per loan, and a connection a database restart closed while it sat idle is replaced, not lent."""

from __future__ import annotations

import time

import psycopg
import pytest
from psycopg_pool import ConnectionPool

from application.store import database
from application.store.database import check_if_stale, note_use


class Recorded:
    def __init__(self) -> None:
        self.checked = 0

    def check(self, conn: object) -> None:
        self.checked += 1


@pytest.fixture
def recorded(monkeypatch: pytest.MonkeyPatch) -> Recorded:
    recorded = Recorded()
    monkeypatch.setattr(ConnectionPool, "check_connection", staticmethod(recorded.check))
    return recorded


class Connection:
    """Stands for a pooled connection: the check only reads and stamps an attribute on it."""


def test_a_connection_used_within_the_stale_time_is_lent_without_a_check(recorded: Recorded) -> None:
    conn = Connection()
    note_use(conn)  # type: ignore[arg-type]
    check_if_stale(conn)  # type: ignore[arg-type]
    assert recorded.checked == 0


def test_a_connection_idle_longer_or_never_used_is_checked(recorded: Recorded, monkeypatch) -> None:
    check_if_stale(Connection())  # type: ignore[arg-type]  # new: never lent
    conn = Connection()
    note_use(conn)  # type: ignore[arg-type]
    monkeypatch.setattr(database, "STALE_SECONDS", 0.0)
    time.sleep(0.01)
    check_if_stale(conn)  # type: ignore[arg-type]
    assert recorded.checked == 2


def test_a_connection_closed_by_the_server_while_idle_is_replaced_before_it_is_lent(
    database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(database, "STALE_SECONDS", 0.05)
    with ConnectionPool(
        database_url, min_size=1, max_size=1, check=check_if_stale, reset=note_use, open=True
    ) as pool:
        with pool.connection() as conn:
            first = conn.info.backend_pid
        with psycopg.connect(database_url, autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(%s)", [first])
        time.sleep(0.1)  # idle past the stale time, as across a database restart
        with pool.connection() as conn:
            assert conn.execute("SELECT 1").fetchone() == (1,)
            assert conn.info.backend_pid != first
