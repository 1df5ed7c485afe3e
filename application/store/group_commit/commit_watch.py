"""Bounds on the group committer's connection (`application.store.group_commit`), and whether it commits.

PostgreSQL's lock and statement timeouts bound what the server does. They cannot bound a wait the server is
not in: a backend waiting for the rest of a message the client never sends (`ClientRead` in
pg_stat_activity), a server or network that went silent without closing the connection. The committer's
thread would then wait for ever, and every save of the process behind it.

`CommitWatch` gives each use of the committer's connection a deadline. A use that overruns it is interrupted
from the watch's own thread: the connection's socket is shut down, so that the committer's wait ends at once
with a connection error, whatever the server does. The server is not asked to cancel: a backend running a
statement sees its client gone within a second (`client_connection_check_interval`, set on every connection
by `application.store.database.Timeouts`) and ends it, letting go of its locks. A cancel would do harm in
the one wait the server's own timeouts leave unbounded at COMMIT: the wait for a synchronous standby
(`SyncRep`, when none is there). Cancelled, that wait ends with the transaction committed on the primary
alone and visible; the read back would find its events and the save would be acknowledged, then lost if the
primary failed before a standby had it. Left alone, the commit stays invisible until a standby has it; the
read back finds nothing, the save fails (503, a retried key finds whatever committed in the end), and the
committer's next batches wait for the table lock that commit holds, so /health says `committer_stalled`.

The committer settles an interrupted batch as after any lost connection (what landed succeeds, the rest
fails and is answered 503 with Retry-After), and the next batch runs on a new connection. The connection is
never closed from the watch's thread (psycopg frees it on close, under the committer's feet): the committer
leaves its use of the connection only once an interruption is over, and closes it then, so that its pool
discards it.

`CommitProgress` says whether the committer commits, for GET /health: a batch under way for longer than the
bound, batches failing for longer than it while saves keep coming, or saves waiting that long for a
committer that does not take them.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import psycopg
from prometheus_client import Counter

from application.store.hung_servers import shut_down

INTERRUPTED = Counter(
    "broker_ledger_group_commit_interruptions",
    "Batches of the group committer interrupted for overrunning their deadline (their connection replaced)",
)
log = logging.getLogger(__name__)


@dataclass
class WatchedUse:
    """One use of a connection under watch: until when it may run, and whether the watch interrupted it."""

    connection: psycopg.Connection[Any]
    deadline: float  # time.monotonic()
    seconds: float
    interrupted: bool = False


class CommitWatch:
    """Interrupts the connection of a use that overruns its deadline (see the module docstring). One daemon
    thread, started with the first use, watching one use at a time (the committer's)."""

    def __init__(self, name: str = "group-commit-watch") -> None:
        self._name = name
        self._changed = threading.Condition()
        self._watched: WatchedUse | None = None
        self._thread: threading.Thread | None = None

    @contextmanager
    def watching(self, connection: psycopg.Connection[Any], seconds: float) -> Iterator[WatchedUse]:
        """Within the block, `connection` is interrupted if the block runs longer than `seconds`."""
        use = WatchedUse(connection, time.monotonic() + seconds, seconds)
        with self._changed:
            self._start()
            self._watched = use
            self._changed.notify()
        try:
            yield use
        finally:
            with self._changed:  # waits for an interruption under way: the connection is ours until it ends
                self._watched = None
                self._changed.notify()
            if use.interrupted:  # closed by its owner, so that its pool discards it rather than lend it again
                connection.close()

    def _start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._watch_forever, name=self._name, daemon=True)
            self._thread.start()

    def _watch_forever(self) -> None:
        with self._changed:
            while True:
                use = self._watched
                if use is None or use.interrupted:
                    self._changed.wait()
                    continue
                left = use.deadline - time.monotonic()
                if left > 0:
                    self._changed.wait(left)
                    continue
                use.interrupted = True
                try:
                    interrupt(use.connection, f"its batch overran its deadline of {use.seconds:g} s")
                except Exception:  # the watch must outlive any one interruption
                    log.exception("could not interrupt the group committer's connection")


def interrupt(connection: psycopg.Connection[Any], why: str) -> None:
    """Ends whatever `connection` waits for, from another thread, by shutting its socket down (the connection
    is left to its owner to close); never with a cancel request (see the module docstring)."""
    log.warning("interrupting the group committer's connection: %s", why)
    INTERRUPTED.inc()
    shut_down(connection)


class CommitProgress:
    """What the committer did lately: the batch under way, since when batches fail with none committed, and
    the last failure. Updated by the committer's thread, read by GET /health's."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._batch_since: float | None = None
        self._failing_since: float | None = None
        self._last_ended = 0.0
        self._last_failure = ""

    def began(self) -> None:
        with self._lock:
            self._batch_since = time.monotonic()

    def ended(self, committed: bool, failure: BaseException | None) -> None:
        now = time.monotonic()
        with self._lock:
            self._batch_since, self._last_ended = None, now
            if committed:
                self._failing_since, self._last_failure = None, ""
                return
            if self._failing_since is None:
                self._failing_since = now
            self._last_failure = str(failure or "unknown")[:300]

    def stalled(self, bound: float, queued_for: float) -> str | None:
        """Why the committer does not commit, or None: a batch under way for longer than `bound`, batches
        failing for longer than it with one under way or ended within it (saves keep coming), or a save
        queued for `queued_for` > `bound` seconds that no batch took."""
        now = time.monotonic()
        with self._lock:
            batch_since, failing_since = self._batch_since, self._failing_since
            last_ended, failure = self._last_ended, self._last_failure
        if batch_since is not None and now - batch_since > bound:
            return f"the event store's committer has been writing one batch for {now - batch_since:.0f} s"
        recent = batch_since is not None or queued_for > 0 or now - last_ended <= bound
        if failing_since is not None and now - failing_since > bound and recent:
            return (
                f"the event store's committer has committed nothing for {now - failing_since:.0f} s;"
                f" its last batch failed: {failure}"
            )
        if queued_for > bound:
            return f"saves have waited {queued_for:.0f} s for the event store's committer"
        return None
