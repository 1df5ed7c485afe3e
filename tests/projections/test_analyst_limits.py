"""The analyst role cannot hold up the service: it takes no advisory lock (only the service's role may, in its
database), its statements end, and it holds a bounded number of connections."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict

from application.credentials import VAR_ENV
from application.store.advisory_locks import LOCK_FUNCTIONS
from application.store.database import build_url
from application.store.schema_lock import SCHEMA_LOCK
from projections import status
from projections.base.runner import STARTUP_LOCK, open_view
from projections.catalog import PROJECTIONS
from projections.live import ProjectionWorker
from tests.projections.conftest import connect_as
from tests.projections.stall_support import eventually, head_of
from tests.projections.support import create_role
from tests.projections.support import run_cli as run

SERVICE_KEYS = [SCHEMA_LOCK, STARTUP_LOCK, *(spec.lock_key() for spec in PROJECTIONS)]


def lock_call(function: str) -> str:
    """A call of an advisory-lock function (`pg_catalog.pg_try_advisory_lock(bigint)`) on the schema's key,
    or on a key of two integers."""
    name = function.partition("(")[0]
    return f"SELECT {name}({SCHEMA_LOCK})" if "bigint" in function else f"SELECT {name}(1, 2)"


def refused(conn: psycopg.Connection, statement: str) -> bool:
    try:
        conn.execute(statement)
    except psycopg.errors.InsufficientPrivilege:
        return True
    return False


def test_the_analyst_role_may_call_no_advisory_lock_function(populated, analyst_name):
    assert create_role(analyst_name) == 0

    with connect_as(populated, analyst_name, "pw-1") as conn:
        allowed = [function for function in LOCK_FUNCTIONS if not refused(conn, lock_call(function))]
        assert conn.execute("SELECT pg_advisory_unlock_all()").fetchone() is not None  # releasing is harmless

    assert allowed == []


def test_the_service_starts_and_reports_while_an_analyst_tries_its_locks_and_keeps_a_transaction_open(
    populated, analyst_name, capsys
):
    assert create_role(analyst_name) == 0
    with connect_as(populated, analyst_name, "pw-1") as analyst:
        for key in SERVICE_KEYS:
            assert refused(analyst, f"SELECT pg_try_advisory_lock({key})"), key
        analyst.execute("BEGIN")
        analyst.execute("SELECT count(*) FROM read.transactions").fetchone()

        for spec in PROJECTIONS:  # what a start does: each view's tables made sure of, under the start lock
            open_view(populated, spec).datastore.close()
        worker = ProjectionWorker(populated, PROJECTIONS, retry_seconds=0.1)
        worker.start()
        try:
            assert worker.running.wait(15), "the worker did not take every projection's lock"
            eventually(lambda: set(positions(populated).values()) == {head_of(populated)})
        finally:
            worker.stop()
        capsys.readouterr()

        assert run("projections", "status") == 0
        assert analyst.info.transaction_status == psycopg.pq.TransactionStatus.INTRANS
    assert "ReadModels" in capsys.readouterr().out


def positions(url: str) -> dict[str, int]:
    with psycopg.connect(url, autocommit=True) as conn:
        return status.positions(conn, [spec.name for spec in PROJECTIONS])


def test_an_analysts_statement_that_outlasts_its_timeout_is_cancelled(populated, analyst_name, capsys):
    assert create_role(analyst_name, "--statement-timeout", "1") == 0
    assert "statements cancelled after 1 s" in capsys.readouterr().out

    with connect_as(populated, analyst_name, "pw-1") as conn:
        assert conn.execute("SHOW lock_timeout").fetchone()[0] == "10s"
        assert conn.execute("SHOW idle_in_transaction_session_timeout").fetchone()[0] == "1min"
        with pytest.raises(psycopg.errors.QueryCanceled, match="statement timeout"):
            conn.execute("SELECT pg_sleep(3)")


def test_the_analyst_role_holds_no_more_connections_than_its_limit(populated, analyst_name):
    assert create_role(analyst_name, "--connections", "1") == 0

    with (
        connect_as(populated, analyst_name, "pw-1"),
        pytest.raises(psycopg.OperationalError, match="too many connections for role"),
    ):
        connect_as(populated, analyst_name, "pw-1")


@pytest.mark.parametrize("option", ["--statement-timeout", "--connections"])
def test_a_limit_below_one_is_refused(populated, analyst_name, option, capsys):
    assert run("analyst", "create-role", "--name", analyst_name, option, "0") == 2
    assert "must be at least 1" in capsys.readouterr().err


@pytest.fixture
def service_role(fresh_database: str) -> Iterator[str]:
    """A service role that is not a superuser: it owns the fresh database and may create roles. Dropped at
    the end, what it owns handed back to the server's user."""
    name = f"service_{uuid.uuid4().hex[:10]}"
    role = sql.Identifier(name)
    with psycopg.connect(fresh_database, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE ROLE {} LOGIN CREATEROLE PASSWORD 'service-pw'").format(role))
        conn.execute(sql.SQL("ALTER DATABASE {} OWNER TO {}").format(sql.Identifier(conn.info.dbname), role))
    yield name
    with psycopg.connect(fresh_database, autocommit=True) as conn:
        conn.execute(sql.SQL("REASSIGN OWNED BY {} TO CURRENT_USER").format(role))
        conn.execute(sql.SQL("DROP OWNED BY {}").format(role))
        conn.execute(sql.SQL("DROP ROLE {}").format(role))


def as_role(url: str, user: str, password: str) -> str:
    return build_url({**conninfo_to_dict(url), "user": user, "password": password})


def statements_for_a_superuser(message: str) -> list[str]:
    """The statements a refusal asks a superuser to run: its lines that start with REVOKE or GRANT."""
    lines = [line.strip() for line in message.splitlines()]
    return [line.rstrip(";") for line in lines if line.startswith(("REVOKE", "GRANT"))]


def test_a_service_role_that_is_not_a_superuser_gets_the_statements_a_superuser_must_run_first(
    fresh_database, service_role, analyst_name, tmp_path, monkeypatch, capsys
):
    service_url = as_role(fresh_database, service_role, "service-pw")
    monkeypatch.setenv("DATABASE_URL", service_url)
    monkeypatch.setenv(VAR_ENV, str(tmp_path / "var"))

    assert create_role(analyst_name) == 2
    refusal = capsys.readouterr().err
    assert f"role {analyst_name} not created" in refusal
    assert "only a superuser can change that" in refusal
    with psycopg.connect(fresh_database, autocommit=True) as superuser:
        for statement in statements_for_a_superuser(refusal):
            superuser.execute(statement)

    assert create_role(analyst_name) == 0
    with psycopg.connect(service_url, autocommit=True) as service:
        assert service.execute("SELECT pg_try_advisory_lock(%s)", (SCHEMA_LOCK,)).fetchone()[0] is True
    with connect_as(fresh_database, analyst_name, "pw-1") as analyst:
        assert refused(analyst, f"SELECT pg_try_advisory_lock({SCHEMA_LOCK})")


def test_an_analyst_role_granted_a_lock_function_of_its_own_is_refused_until_the_grant_is_revoked(
    populated, analyst_name, capsys
):
    assert create_role(analyst_name) == 0
    grant = sql.SQL("GRANT EXECUTE ON FUNCTION pg_catalog.pg_try_advisory_lock(bigint) TO {}")
    with psycopg.connect(populated, autocommit=True) as superuser:
        superuser.execute(grant.format(sql.Identifier(analyst_name)))

    assert create_role(analyst_name) == 2

    refusal = capsys.readouterr().err
    assert f"role {analyst_name} not updated: it could still take advisory locks" in refusal
    assert "pg_catalog.pg_try_advisory_lock(bigint)" in refusal
