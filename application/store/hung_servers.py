"""Connections to a server that hangs are cut, so that the process follows its database's failover.

A PostgreSQL server whose processes are stopped (a frozen machine whose kernel still runs, or a server
SIGSTOPped, as `tests/ha` does to a primary) keeps its TCP connections open and accepts new ones, and never
answers: libpq waits for ever on a statement sent to it (its `statement_timeout` is the server's to enforce,
and TCP keepalives are answered by the kernel). Every connection of the process's pools that was on that
server would then hold its pool's slot for ever, and once Patroni has promoted a standby the process could
still not reach it: its pools full of connections waiting for the old primary.

`HungServers` watches every connection the process opens (`TrackedConnection`, the connection class of
every pool and of the projection runners). Once a second it looks at those running a statement; when one has
been running for SUSPECT_SECONDS, it asks the server for a new connection (PROBE_SECONDS to answer). A server
that answers is busy, and nothing is done (a long statement is not cut); one that accepts the connection and
says nothing within PROBE_SECONDS is hung: every connection of the process to it (running or idle in a pool)
has its socket shut down. Their waits end with a connection error (the request is answered 503, the pool
discards the connection), and the next connection goes through the URL to whichever server takes writes
now. A server that refuses the probe for another reason (too many connections, a password) is not hung.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
import time
import weakref
from typing import Any

import psycopg
from prometheus_client import Counter
from psycopg import pq

SUSPECT_SECONDS = 4.0  # a statement running this long makes its server suspect
PROBE_SECONDS = 2  # how long a suspect server has to answer a new connection
PERIOD_SECONDS = 1.0  # how often the running statements are looked at
CUT = Counter(
    "broker_ledger_hung_server_connections_cut",
    "Connections to a server that stopped answering, shut down so that the process reconnects elsewhere",
)
log = logging.getLogger(__name__)
Server = tuple[str, int]  # (host, port)


class HungServers:
    """The process's watch over its connections (see the module docstring); one daemon thread, started with
    the first connection."""

    def __init__(self) -> None:
        self._connections: weakref.WeakSet[Any] = weakref.WeakSet()
        self._running_since: dict[int, float] = {}  # id of a connection -> when it was first seen running
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def track(self, connection: Any) -> None:
        with self._lock:
            self._connections.add(connection)
            if self._thread is None:
                self._thread = threading.Thread(target=self._watch_forever, name="hung-servers", daemon=True)
                self._thread.start()

    def _watch_forever(self) -> None:
        while True:
            time.sleep(PERIOD_SECONDS)
            try:
                self.sweep()
            except Exception:  # the watch must outlive any one sweep
                log.exception("could not look for hung database servers")

    def sweep(self) -> list[Server]:
        """Probes the servers of the statements running for SUSPECT_SECONDS; cuts the connections to those
        that do not answer. Returns the servers found hung."""
        hung = [server for server in self._suspects() if not answers(server, self._credentials(server))]
        for server in hung:
            self.cut(server)
        return hung

    def cut(self, server: Server) -> int:
        """Shuts down the socket of every connection to `server`; how many."""
        cut = [conn for conn in self._live() if _server_of(conn) == server]
        log.warning(
            "database server %s:%s does not answer: cutting %d connection(s) to it", *server, len(cut)
        )
        for connection in cut:
            shut_down(connection)
        CUT.inc(len(cut))
        return len(cut)

    def _suspects(self) -> set[Server]:
        now = time.monotonic()
        running: dict[int, float] = {}
        suspects: set[Server] = set()
        for connection in self._live():
            if not _running(connection):
                continue
            since = running[id(connection)] = self._running_since.get(id(connection), now)
            if now - since >= SUSPECT_SECONDS and (server := _server_of(connection)) is not None:
                suspects.add(server)
        self._running_since = running
        return suspects

    def _credentials(self, server: Server) -> dict[str, Any]:
        for connection in self._live():
            if _server_of(connection) == server:
                info = connection.info
                return {"dbname": info.dbname, "user": info.user, "password": info.password}
        return {}

    def _live(self) -> list[Any]:
        with self._lock:
            return [connection for connection in self._connections if not connection.closed]


WATCH = HungServers()  # the process's one


class TrackedConnection(psycopg.Connection[Any]):
    """A psycopg connection the process's watch knows of (a pool's `connection_class`)."""

    @classmethod
    def connect(cls, *args: Any, **kwargs: Any) -> Any:
        connection = super().connect(*args, **kwargs)
        WATCH.track(connection)
        return connection


class TrackedAsyncConnection(psycopg.AsyncConnection[Any]):
    """An asyncio psycopg connection the process's watch knows of (an async pool's `connection_class`)."""

    @classmethod
    async def connect(cls, *args: Any, **kwargs: Any) -> Any:
        connection = await super().connect(*args, **kwargs)
        WATCH.track(connection)
        return connection


def answers(server: Server, credentials: dict[str, Any]) -> bool:
    """Whether `server` takes a new connection within PROBE_SECONDS; a refusal for another reason than the
    time (a full server, a bad password) counts as an answer."""
    host, port = server
    try:
        with psycopg.connect(
            host=host,
            port=port,
            connect_timeout=PROBE_SECONDS,
            application_name="broker-ledger probe",
            **credentials,
        ):
            return True
    except psycopg.errors.ConnectionTimeout:
        return False
    except psycopg.Error:
        return True


def shut_down(connection: Any) -> None:
    """Ends whatever `connection` waits for, from another thread: its socket shut down (a duplicate of its
    descriptor, closed after: the connection's own is left to its owner, who closes it)."""
    try:
        descriptor = os.dup(connection.fileno())
    except (psycopg.Error, OSError):  # closed meanwhile: nothing waits on it any more
        return
    try:
        duplicate = socket.socket(fileno=descriptor)
    except OSError:
        os.close(descriptor)
        return
    with duplicate, contextlib.suppress(OSError):
        duplicate.shutdown(socket.SHUT_RDWR)


def _running(connection: Any) -> bool:
    with contextlib.suppress(psycopg.Error, OSError, AttributeError):
        return connection.pgconn.transaction_status == pq.TransactionStatus.ACTIVE
    return False


def _server_of(connection: Any) -> Server | None:
    with contextlib.suppress(psycopg.Error, OSError, ValueError):
        return (connection.info.host, int(connection.info.port))
    return None
