"""A client that commits one row per transaction through libpq's multi-host URL, as fast as it can, and
reconnects on any error: what a service would do while its database fails over.

A commit counts as acknowledged only when it returned. A statement that hangs (a SIGSTOPped server keeps its
TCP connections open, so no error ever comes) is cut after COMMIT_TIMEOUT by shutting the connection's socket
down: its outcome is unknown, as for a client whose server died mid-commit, and it is counted unanswered.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import socket
import threading
import time

import psycopg

COMMIT_TIMEOUT = 3.0  # a commit normally returns in milliseconds
CONNECT_TIMEOUT = 2  # per host: a hung server accepts the TCP connection and never answers


class Writer(threading.Thread):
    """Inserts (request, round) rows into ha_probe; `acked` holds (request, monotonic time its commit
    returned), `unanswered` the requests whose commit raised or was cut (their rows may be there or not)."""

    def __init__(self, url: str, round_: int) -> None:
        super().__init__(name=f"ha-writer-{round_}", daemon=True)
        self.url, self.round = url, round_
        self.acked: list[tuple[int, float]] = []
        self.unanswered: list[int] = []
        self.ports: list[int] = []  # the server of each acknowledged commit, in the order of `acked`
        self.errors: list[str] = []
        self._halt = threading.Event()
        self._lock = threading.Lock()
        self._in_flight: tuple[psycopg.Connection, float] | None = None
        self._watchdog = threading.Thread(
            target=self._cut_hung_statements, name=f"{self.name}-watchdog", daemon=True
        )

    def stop(self, timeout: float = 10.0) -> None:
        self._halt.set()
        self.join(timeout)
        self._watchdog.join(timeout)
        assert not self.is_alive(), "the writer did not stop"

    def acked_by(self, port: int) -> int:
        """How many commits the server on `port` acknowledged."""
        return self.ports.count(port)

    def run(self) -> None:
        self._watchdog.start()
        connection: psycopg.Connection | None = None
        request = self.round * 1_000_000
        while not self._halt.is_set():
            try:
                if connection is None:
                    connection = psycopg.connect(self.url, autocommit=True, connect_timeout=CONNECT_TIMEOUT)
            except psycopg.Error as error:
                self._note(error)
                time.sleep(0.1)
                continue
            request += 1
            try:
                with self._lock:
                    self._in_flight = (connection, time.monotonic())
                connection.execute(
                    "INSERT INTO ha_probe (request, round) VALUES (%s, %s)", (request, self.round)
                )
                self.acked.append((request, time.monotonic()))
                self.ports.append(connection.info.port)
            except psycopg.Error as error:
                self.unanswered.append(request)
                self._note(error)
            finally:
                with self._lock:
                    self._in_flight = None
            if connection.closed or connection.broken:
                connection = None
        if connection is not None:
            connection.close()

    def _note(self, error: Exception) -> None:
        if len(self.errors) < 20:
            self.errors.append(f"{type(error).__name__}: {str(error).strip()[:200]}")

    def _cut_hung_statements(self) -> None:
        while not self._halt.wait(0.1):
            with self._lock:
                if self._in_flight is None:
                    continue
                connection, since = self._in_flight
                if time.monotonic() - since > COMMIT_TIMEOUT and not connection.closed:
                    # shutdown acts on the socket, not on the duplicated descriptor: libpq's read ends
                    with (
                        contextlib.suppress(OSError),
                        socket.socket(fileno=os.dup(connection.pgconn.socket)) as sock,
                    ):
                        sock.shutdown(socket.SHUT_RDWR)
                    self._in_flight = None


def longest_gap(acked: list[tuple[int, float]], fault_at: float) -> float:
    """The longest time without an acknowledged commit from the last one before `fault_at` on."""
    times = sorted(at for _, at in acked)
    before = [at for at in times if at <= fault_at]
    after = [at for at in times if at > fault_at]
    if not after:
        return float("inf")
    points = [before[-1] if before else fault_at, *after]
    return max(later - earlier for earlier, later in itertools.pairwise(points))
