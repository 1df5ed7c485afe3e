from __future__ import annotations

import logging
import shutil
import socket
import tempfile
from pathlib import Path
from uuid import UUID, uuid4

import psycopg
import pytest
from eventsourcing.application import Application

from application.store import database
from application.store.database import (
    ApiPools,
    api_pools,
    connection_budget,
    ensure_schema,
    eventsourcing_env,
    resolve_database_url,
    tagged,
    with_database,
)
from tests.application.notes import Note


class Notebook(Application[UUID]):
    def write(self, text: str) -> UUID:
        note = Note(text)
        self.save(note)
        return note.id

    def amend(self, note_id: UUID, text: str) -> None:
        note: Note = self.repository.get(note_id)
        note.amend(text)
        self.save(note)

    def read(self, note_id: UUID) -> str:
        note: Note = self.repository.get(note_id)
        return note.text


def test_env_from_a_tcp_url_names_host_port_user_password_and_database(monkeypatch):
    monkeypatch.delenv("BROKER_LEDGER_DB_CONNECTIONS", raising=False)
    monkeypatch.delenv("BROKER_LEDGER_GROUP_COMMIT", raising=False)
    env = eventsourcing_env("postgresql://broker:s%40cret@db.example:6543/ledger", "ledger")
    assert env == {
        "PERSISTENCE_MODULE": "application.store.database:BudgetedPostgresFactory",
        "POSTGRES_DBNAME": "ledger",
        "POSTGRES_HOST": "db.example",
        "POSTGRES_PORT": "6543",
        "POSTGRES_USER": "broker",
        "POSTGRES_PASSWORD": "s@cret",
        "POSTGRES_SCHEMA": "ledger",
        "POSTGRES_POOL_SIZE": "0",
        "POSTGRES_MAX_OVERFLOW": "2",
        "POSTGRES_APPLICATION_NAME": "broker-ledger events",
        "POSTGRES_CONNECT_TIMEOUT": "3",
        "POSTGRES_LIBPQ_PARAMS": "connect_timeout=3",
        "POSTGRES_PRE_PING": "no",
        "POSTGRES_OPTIONS": (
            "-c lock_timeout=5000 -c statement_timeout=10000 -c client_connection_check_interval=1000"
        ),
        "APPLICATION_RECORDER_TOPIC": "application.store.group_commit:GroupCommitRecorder",
    }


def test_env_from_a_socket_url_uses_the_socket_directory_as_host(monkeypatch):
    monkeypatch.delenv("PGPORT", raising=False)
    env = eventsourcing_env(
        "postgresql://postgres:@/postgres?host=/tmp/bl-pg-x/pgdata", "t_1", connections=10
    )
    assert env["POSTGRES_HOST"] == "/tmp/bl-pg-x/pgdata"
    assert env["POSTGRES_PORT"] == "5432"
    assert env["POSTGRES_USER"] == "postgres"
    assert env["POSTGRES_PASSWORD"] == ""
    assert env["POSTGRES_DBNAME"] == "postgres"
    assert env["POSTGRES_SCHEMA"] == "t_1"
    assert env["POSTGRES_MAX_OVERFLOW"] == "3"  # the event store's share of 10 (api_pools)


def test_the_connection_budget_is_shared_by_the_api_pools_without_going_over():
    for budget in range(6, 41):
        pools = api_pools(budget)
        assert pools.total == budget
        assert min(pools.events, pools.read_models, pools.api, pools.idempotency, pools.heavy_reads) >= 1
    assert api_pools(8) == ApiPools(events=2, read_models=2, api=1, idempotency=1, heavy_reads=2)


@pytest.mark.parametrize("value", ["many", "5", "0"])
def test_a_connection_budget_that_is_not_a_number_of_at_least_6_is_refused(value):
    with pytest.raises(ValueError, match="BROKER_LEDGER_DB_CONNECTIONS"):
        connection_budget(value)


def test_a_tagged_url_names_its_connections_in_pg_stat_activity(database_url):
    with psycopg.connect(tagged(database_url, "test-pool")) as connection:
        name = connection.execute("SELECT current_setting('application_name')").fetchone()[0]
    assert name == "broker-ledger test-pool"


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://broker:s%40cret@db.example:6543/ledger",
        "postgresql://postgres:@/postgres?host=/tmp/bl-pg-x/pgdata",
        "postgresql://u@[::1]:5433/d?sslmode=disable",
    ],
)
def test_with_database_changes_only_the_database(url):
    before = psycopg.conninfo.conninfo_to_dict(url)
    after = psycopg.conninfo.conninfo_to_dict(with_database(url, "other db"))
    assert after == {**before, "dbname": "other db"}


def test_database_url_from_the_environment_is_used_as_it_is(monkeypatch, tmp_path):
    assert resolve_database_url(tmp_path, "postgresql://u:p@h:1/d") == "postgresql://u:p@h:1/d"
    assert not (tmp_path / "pgdata").exists()


def test_ensure_schema_twice_is_fine(database_url):
    ensure_schema(database_url, "twice")
    ensure_schema(database_url, "twice")
    with psycopg.connect(database_url) as connection:
        found = connection.execute("SELECT count(*) FROM pg_namespace WHERE nspname = 'twice'").fetchone()
        connection.execute('DROP SCHEMA "twice"')
    assert found == (1,)


def test_an_application_saves_and_reloads_aggregates_through_postgres(postgres_env):
    notebook = Notebook(env=postgres_env)
    try:
        note_id = notebook.write("first")
        notebook.amend(note_id, "second")
    finally:
        notebook.close()

    reopened = Notebook(env=postgres_env)
    try:
        assert reopened.read(note_id) == "second"
        assert [n.id for n in reopened.notification_log.select(start=1, limit=10)] == [1, 2]
    finally:
        reopened.close()

    with psycopg.connect(with_database_for(postgres_env)) as connection:
        tables = connection.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = %s",
            (postgres_env["POSTGRES_SCHEMA"],),
        ).fetchall()
    assert ("notebook_events",) in tables


def with_database_for(env: dict[str, str]) -> str:
    return psycopg.conninfo.make_conninfo(
        dbname=env["POSTGRES_DBNAME"],
        host=env["POSTGRES_HOST"],
        port=env["POSTGRES_PORT"],
        user=env["POSTGRES_USER"],
        password=env["POSTGRES_PASSWORD"],
    )


def test_without_database_url_an_embedded_server_is_started(monkeypatch, caplog):
    monkeypatch.delenv("DATABASE_URL", raising=False)
    var_dir = Path(tempfile.mkdtemp(prefix="bl-v-", dir="/tmp")) / "var"
    try:
        with caplog.at_level(logging.INFO, logger=database.__name__):
            url = resolve_database_url(var_dir, "")
        assert (var_dir / "pgdata" / "PG_VERSION").exists()
        assert "embedded" in caplog.text
        assert resolve_database_url(var_dir, "") == url  # the running server is reused
        with psycopg.connect(url, connect_timeout=5) as connection:
            assert connection.execute("select 1").fetchone() == (1,)
    finally:
        database.stop_embedded_server()
        shutil.rmtree(var_dir.parent, ignore_errors=True)


def test_the_event_stores_connections_go_to_the_server_a_multi_host_url_picks_for_writes(database_url):
    params = psycopg.conninfo.conninfo_to_dict(database_url)
    host, port = params.get("host") or "127.0.0.1", params.get("port") or "5432"
    unused = socket_nobody_listens_on()
    # the first host refuses the connection; libpq tries the next, which takes writes
    url = database.build_url(
        {
            **params,
            "host": f"127.0.0.1,{host}",
            "port": f"{unused},{port}",
            "target_session_attrs": "read-write",
        }
    )
    schema = f"t_{uuid4().hex[:12]}"
    ensure_schema(database_url, schema)
    notebook = Notebook(env=eventsourcing_env(url, schema))
    try:
        pool = notebook.factory.datastore.pool
        assert pool.kwargs["target_session_attrs"] == "read-write"
        assert pool.kwargs["connect_timeout"] == "3"
        note_id = notebook.write("on the primary")
        assert notebook.read(note_id) == "on the primary"
    finally:
        notebook.close()
        with psycopg.connect(database_url, autocommit=True) as connection:
            connection.execute(f'DROP SCHEMA "{schema}" CASCADE')


def socket_nobody_listens_on() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
