"""The group committer cannot wedge: a statement larger than the socket takes at once commits (psycopg's
pipeline sync once left its tail unsent, and the server and the committer waited for each other for ever);
a batch that holds its connection past COMMIT_DEADLINE, for a pause the server's timeouts do not bound or a
connection gone silent, is interrupted, fails its waiters, and the saves behind it land on a new connection;
and a committer that does not commit says so (`stalled`, read by GET /health)."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from typing import Any
from uuid import UUID

import psycopg
import pytest
from eventsourcing.application import Application
from eventsourcing.persistence import OperationalError

from application.store.group_commit import commit_watch
from application.store.group_commit import recorder as group_commit
from tests.application.notes import Note
from tests.application.test_group_commit_faults import recorder_of, stored_texts, url_of
from tests.projections.stall_support import eventually

SHORT_DEADLINE = 1.0
LARGE_STATEMENT = [("SELECT length(%s::bytea)", [bytes(64 * 1024 * 1024)])]
# a pause of the batch that no server timeout ends: only the committer's own deadline does
SERVER_PAUSE = [("SELECT set_config('statement_timeout', '0', true)", ()), ("SELECT pg_sleep(60)", ())]
PAUSED = "SELECT count(*) FROM pg_stat_activity WHERE query = 'SELECT pg_sleep(60)' AND state = 'active'"
CANCEL_PAUSE = "SELECT pg_cancel_backend(pid) FROM pg_stat_activity WHERE query = 'SELECT pg_sleep(60)'"


@pytest.fixture
def notebook(pooled_env: dict[str, str]) -> Iterator[Application[UUID]]:
    app: Application[UUID] = Application(env=pooled_env)
    yield app
    app.close()


def test_a_statement_of_64_mb_commits_and_the_committer_carries_on(notebook):
    recorder = recorder_of(notebook)
    [[(length,)]] = asyncio.run(recorder.write_along(LARGE_STATEMENT))
    assert length == 64 * 1024 * 1024
    note = Note("after the large statement")
    notebook.save(note)
    assert stored_texts(notebook, note) == ["after the large statement"]


def test_a_batch_the_server_holds_past_the_deadline_fails_and_the_save_behind_it_lands(
    notebook, pooled_env, monkeypatch
):
    monkeypatch.setattr(group_commit, "COMMIT_DEADLINE", SHORT_DEADLINE)
    recorder = recorder_of(notebook)
    behind = Note("queued behind the pause")

    async def pause_then_save() -> None:
        paused = asyncio.ensure_future(recorder.write_along(SERVER_PAUSE))
        await asyncio.sleep(0.3)  # the pause is the committer's batch by now
        saved = asyncio.ensure_future(asyncio.to_thread(notebook.save, behind))
        with pytest.raises(OperationalError, match=f"did not finish a batch within {SHORT_DEADLINE:g} s"):
            await paused
        await saved

    started = time.monotonic()
    asyncio.run(pause_then_save())
    assert time.monotonic() - started < SHORT_DEADLINE + 8.0
    assert stored_texts(notebook, behind) == ["queued behind the pause"]
    with psycopg.connect(url_of(pooled_env), autocommit=True) as admin:
        eventually(
            lambda: admin.execute(PAUSED).fetchone()[0] == 0, seconds=10
        )  # cancelled, not left running


def test_a_connection_gone_silent_is_shut_down_at_the_deadline_and_the_save_lands_on_a_new_one(
    pooled_env, monkeypatch
):
    monkeypatch.setattr(group_commit, "COMMIT_DEADLINE", SHORT_DEADLINE)
    with silenceable_proxy(pooled_env) as proxy:
        app: Application[UUID] = Application(env={**pooled_env, **proxy.env})
        try:
            app.save(Note("through the proxy"))
            proxy.silence()  # the committer's connection: what it sends and what it waits for are lost
            note = Note("after the silence")
            started = time.monotonic()
            app.save(note)  # its first batch fails with the connection, its retry lands on a new one
            assert time.monotonic() - started < SHORT_DEADLINE + 8.0
            assert stored_texts(app, note) == ["after the silence"]
        finally:
            app.close()


def test_a_committer_stuck_in_one_batch_is_reported_until_a_batch_commits(notebook, pooled_env, monkeypatch):
    monkeypatch.setattr(group_commit, "COMMIT_DEADLINE", SHORT_DEADLINE)
    monkeypatch.setattr(commit_watch, "interrupt", lambda connection, why: None)  # a watch that cannot act
    recorder = recorder_of(notebook)
    notebook.save(Note("the committer runs"))
    assert recorder.stalled() is None

    async def stuck_then_cancelled(admin: psycopg.Connection[Any]) -> None:
        paused = asyncio.ensure_future(recorder.write_along(SERVER_PAUSE))
        await asyncio.to_thread(eventually, lambda: "writing one batch" in (recorder.stalled() or ""), 10)
        admin.execute(CANCEL_PAUSE)
        with pytest.raises(OperationalError, match="canceling statement"):
            await paused

    with psycopg.connect(url_of(pooled_env), autocommit=True) as admin:
        asyncio.run(stuck_then_cancelled(admin))
    notebook.save(Note("a batch commits again"))
    assert recorder.stalled() is None


class SilenceableProxy:
    """A TCP proxy in front of PostgreSQL whose open connections can be made to go silent (what either side
    sends is dropped, as by a network that lost its route) while new connections pass."""

    def __init__(self, host: str, port: int) -> None:
        self._upstream = (socket.AF_UNIX, f"{host}/.s.PGSQL.{port}") if host.startswith("/") else None
        self._upstream_tcp = (host, port)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.1)
        self._links: list[dict[str, Any]] = []
        self._closed = threading.Event()
        self.env = {"POSTGRES_HOST": "127.0.0.1", "POSTGRES_PORT": str(self._listener.getsockname()[1])}
        threading.Thread(target=self._accept, daemon=True).start()

    def silence(self) -> None:
        for link in self._links:
            link["silent"] = True

    def close(self) -> None:
        self._closed.set()
        for link in self._links:
            for end in link["ends"]:
                with suppress(OSError):
                    end.shutdown(socket.SHUT_RDWR)
                end.close()
        self._listener.close()

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            upstream = self._connect()
            link: dict[str, Any] = {"ends": (client, upstream), "silent": False}
            self._links.append(link)
            for source, target in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(link, source, target), daemon=True).start()

    def _connect(self) -> socket.socket:
        if self._upstream is not None:
            family, path = self._upstream
            upstream = socket.socket(family)
            upstream.connect(path)
            return upstream
        return socket.create_connection(self._upstream_tcp)

    def _pump(self, link: dict[str, Any], source: socket.socket, target: socket.socket) -> None:
        with suppress(OSError):
            while data := source.recv(65536):
                if not link["silent"]:
                    target.sendall(data)
        if not link["silent"]:  # a side that closes closes the other; a silent link waits for `close`
            with suppress(OSError):
                target.shutdown(socket.SHUT_RDWR)


@contextmanager
def silenceable_proxy(env: dict[str, str]) -> Iterator[SilenceableProxy]:
    proxy = SilenceableProxy(env["POSTGRES_HOST"], int(env["POSTGRES_PORT"]))
    try:
        yield proxy
    finally:
        proxy.close()
