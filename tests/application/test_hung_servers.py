"""Connections to a server that hangs are cut (application/store/hung_servers.py): a statement sent to a
server that accepts connections and never answers (a frozen machine, a SIGSTOPped primary) ends with a
connection error within seconds, so that a pool's slots come back and its next connection can go to the
server that takes writes now; a statement that only runs long, on a server that answers, is left alone.

The hung server is a TCP proxy in front of the test's PostgreSQL whose links, old and new, go silent."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from application.store import hung_servers
from application.store.hung_servers import HungServers, TrackedConnection
from tests.application.test_group_commit_wedge import SilenceableProxy

SUSPECT = 1.0  # seconds: shortened for the test (4 in service)


class HangingProxy(SilenceableProxy):
    """A proxy that can hang as a stopped server does: what it has relayed goes silent, and new connections
    are accepted and never answered."""

    def hang(self) -> None:
        self._hung = True
        self.silence()

    def _accept(self) -> None:
        self._hung = False
        super()._accept()

    def _pump(self, link: dict[str, Any], source: Any, target: Any) -> None:
        if getattr(self, "_hung", False):
            link["silent"] = True
        super()._pump(link, source, target)


@contextmanager
def through_a_proxy(database_url: str) -> Iterator[tuple[HangingProxy, str]]:
    params = conninfo_to_dict(database_url)
    host, port = str(params.get("host") or "127.0.0.1"), int(params.get("port") or 5432)
    proxy = HangingProxy(host, port)
    try:
        through = make_conninfo(
            **{**params, "host": "127.0.0.1", "port": proxy.env["POSTGRES_PORT"], "connect_timeout": "5"}
        )
        yield proxy, through
    finally:
        proxy.close()


def watched(monkeypatch: pytest.MonkeyPatch) -> HungServers:
    """A watch of the test's own (the process's one watches every pool of the suite), sweeping when told."""
    watch = HungServers()
    monkeypatch.setattr(hung_servers, "WATCH", watch)
    monkeypatch.setattr(hung_servers, "SUSPECT_SECONDS", SUSPECT)
    monkeypatch.setattr(watch, "_watch_forever", lambda: None)  # swept by the test, not by a thread
    return watch


def run_in_thread(connection: psycopg.Connection[Any], query: str) -> tuple[threading.Thread, list[Any]]:
    outcome: list[Any] = []

    def run() -> None:
        try:
            outcome.append(connection.execute(query).fetchone())
        except psycopg.Error as error:
            outcome.append(error)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, outcome


def sweep_until(watch: HungServers, done: threading.Thread, seconds: float) -> list[Any]:
    deadline, found = time.monotonic() + seconds, []
    while done.is_alive() and time.monotonic() < deadline:
        found += watch.sweep()
        time.sleep(0.2)
    return found


def test_a_statement_on_a_server_that_hangs_ends_with_a_connection_error_within_seconds(
    database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    watch = watched(monkeypatch)
    with (
        through_a_proxy(database_url) as (proxy, url),
        TrackedConnection.connect(url, autocommit=True) as conn,
    ):
        idle = TrackedConnection.connect(url, autocommit=True)  # idle in a pool, to the same server
        assert conn.execute("SELECT 1").fetchone() == (1,)
        proxy.hang()
        began = time.monotonic()
        thread, outcome = run_in_thread(conn, "SELECT 2")
        hung = sweep_until(watch, thread, 15)
        thread.join(5)
        took = time.monotonic() - began
        assert hung and isinstance(outcome[0], psycopg.OperationalError), outcome
        assert took < SUSPECT + hung_servers.PROBE_SECONDS + 3, f"cut after {took:.1f} s"
        with pytest.raises(psycopg.OperationalError):
            idle.execute("SELECT 3")  # cut too: it would hang as well
        idle.close()


def test_a_long_statement_on_a_server_that_answers_is_left_to_run(
    database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    watch = watched(monkeypatch)
    with through_a_proxy(database_url) as (_, url), TrackedConnection.connect(url, autocommit=True) as conn:
        thread, outcome = run_in_thread(conn, "SELECT pg_sleep(3), 'slept'")
        assert sweep_until(watch, thread, 10) == []
        thread.join(5)
    assert outcome == [("", "slept")], outcome
