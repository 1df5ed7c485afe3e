"""The analysts' limits hold whatever an analyst sets in its own session: the service's projection worker
cancels a statement past its limit and ends a session idle in a transaction past its limit, a rebuild does
not wait behind an analyst's lock, and a session that turns read-only off still cannot write."""

from __future__ import annotations

import time
from collections.abc import Iterator

import psycopg
import pytest

from projections.analyst_watch import TERMINATE_AFTER_SECONDS, overdue
from projections.live import ProjectionWorker
from tests.projections.conftest import connect_as
from tests.projections.scenario import READ_MODELS
from tests.projections.support import create_role
from tests.projections.support import run_cli as run

LIMIT = 2  # seconds: the statement and idle limits of the tests' roles
GRACE = 3  # seconds the service may take past a limit (it looks once a second)


@pytest.fixture
def service(populated: str) -> Iterator[ProjectionWorker]:
    """The service's projection worker, running on the populated database."""
    worker = ProjectionWorker(populated, [READ_MODELS], retry_seconds=0.2)
    worker.start()
    try:
        assert worker.running.wait(15), "the worker did not start the projection"
        yield worker
    finally:
        worker.stop()


def lifted(conn: psycopg.Connection) -> psycopg.Connection:
    """`conn`, an analyst's session, with every limit it can set lifted."""
    for setting in ("statement_timeout", "idle_in_transaction_session_timeout", "lock_timeout"):
        conn.execute(f"SET {setting} = 0")
    conn.execute("SET default_transaction_read_only = off")
    return conn


def test_an_analyst_who_lifts_its_statement_timeout_is_cancelled_past_its_limit(
    populated, analyst_name, service
):
    assert create_role(analyst_name, "--statement-timeout", str(LIMIT)) == 0
    with lifted(connect_as(populated, analyst_name, "pw-1")) as analyst:
        started = time.monotonic()
        with pytest.raises(psycopg.errors.QueryCanceled):
            analyst.execute("SELECT pg_sleep(10)")
        took = time.monotonic() - started

        assert LIMIT <= took < LIMIT + GRACE
        assert (
            analyst.execute("SELECT count(*) FROM read.transactions").fetchone()[0] > 0
        )  # the session lives


def test_an_analyst_idle_in_a_transaction_past_its_limit_is_ended(populated, analyst_name, service):
    assert create_role(analyst_name, "--idle-in-transaction-timeout", str(LIMIT)) == 0
    with lifted(connect_as(populated, analyst_name, "pw-1")) as analyst:
        analyst.execute("BEGIN")
        analyst.execute("LOCK TABLE read.transactions IN ACCESS SHARE MODE")
        pid = analyst.info.backend_pid
        started = time.monotonic()

        with psycopg.connect(populated, autocommit=True) as superuser:
            while superuser.execute("SELECT 1 FROM pg_stat_activity WHERE pid = %s", (pid,)).fetchone():
                assert time.monotonic() - started < LIMIT + GRACE, "the idle session was not ended"
                time.sleep(0.1)
        assert time.monotonic() - started >= LIMIT
        with pytest.raises(psycopg.OperationalError):
            analyst.execute("SELECT 1")


def test_a_rebuild_does_not_wait_for_an_analyst_who_holds_a_read_table(populated, analyst_name, capsys):
    assert create_role(analyst_name) == 0
    with lifted(connect_as(populated, analyst_name, "pw-1")) as analyst:
        analyst.execute("BEGIN")
        analyst.execute("LOCK TABLE read.transactions IN ACCESS SHARE MODE")

        started = time.monotonic()
        assert run("projections", "rebuild", "ReadModels") == 0
        took = time.monotonic() - started

        assert took < 10
        assert "ReadModels: rebuilt to position" in capsys.readouterr().out
        with pytest.raises(psycopg.OperationalError):
            analyst.execute("SELECT 1")


@pytest.mark.parametrize(
    "statement",
    [
        "INSERT INTO read.transactions (partner) VALUES ('x')",
        "UPDATE read.transactions SET partner = partner",
        "DELETE FROM read.transactions",
        "TRUNCATE read.transactions",
        "CREATE TABLE read.mine (x int)",
        "CREATE TABLE public.mine (x int)",
        "CREATE TEMPORARY TABLE mine (x int)",
        "CREATE SCHEMA mine",
    ],
)
def test_an_analyst_who_turns_read_only_off_still_cannot_write(populated, analyst_name, statement):
    assert create_role(analyst_name) == 0
    with (
        lifted(connect_as(populated, analyst_name, "pw-1")) as analyst,
        pytest.raises(psycopg.errors.InsufficientPrivilege),
    ):
        analyst.execute(statement)


def session(state: str, running: float = 0.0, unchanged: float = 0.0) -> dict[str, object]:
    return {
        "state": state,
        "running": running,
        "unchanged": unchanged,
        "statement_seconds": 5,
        "idle_seconds": 7,
    }


@pytest.mark.parametrize(
    ("row", "how"),
    [
        (session("active", running=4.9), None),
        (session("active", running=5.1), "cancel"),
        (session("active", running=5.1 + TERMINATE_AFTER_SECONDS), "terminate"),
        (session("idle in transaction", unchanged=6.9), None),
        (session("idle in transaction", unchanged=7.1), "terminate"),
        (session("idle in transaction (aborted)", unchanged=7.1), "terminate"),
        (session("idle", running=600, unchanged=600), None),
        (session(None, running=600, unchanged=600), None),
    ],
)
def test_a_session_is_signalled_only_past_its_roles_limits(row, how):
    action = overdue(row)
    assert (action and action[0]) == how
