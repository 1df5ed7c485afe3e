"""Every SQL example of docs/analytics.md runs, as the analyst role, against populated read models."""

from __future__ import annotations

import re
from pathlib import Path

import psycopg
import pytest

from application.credentials import VAR_ENV
from interface.cli.analyst import PRIVATE_TABLES
from interface.cli.main import main
from projections.base.runner import open_view, replay
from projections.catalog import PROJECTIONS, by_name
from projections.read_tables import TABLES, VIEWS
from tests.projections.conftest import connect_as
from tests.projections.scenario import READ_MODELS, populate

DOC = Path(__file__).resolve().parents[2] / "docs" / "analytics.md"
SQL_BLOCK = re.compile(r"^```sql\n(.*?)^```", re.MULTILINE | re.DOTALL)


def sql_examples() -> list[str]:
    return SQL_BLOCK.findall(DOC.read_text())


def test_the_guide_has_the_example_queries_it_promises() -> None:
    assert len(sql_examples()) >= 5


def test_the_guide_describes_every_table_and_every_column(make_view) -> None:
    text = DOC.read_text()
    view = make_view()
    with view.datastore.transaction(commit=False) as curs:
        for table in (*TABLES, *VIEWS):
            assert f"`read.{table}`" in text, table
            columns = curs.execute(
                "SELECT column_name FROM information_schema.columns WHERE table_schema = 'read' "
                "AND table_name = %s",
                (table,),
            ).fetchall()
            missing = [c["column_name"] for c in columns if f"`{c['column_name']}`" not in text]
            assert not missing, f"{table}: {missing}"


AUDIT_TABLES = {
    "audit_chain": ("notification_id", "seq", "originator_id", "originator_version", "topic", "event_hash"),
    "audit_checkpoints": ("notification_id", "seq", "chain_hash", "at", "periodic"),
    "merkle_nodes": ("level", "idx", "hash", "notification_id"),
    "audit_tree_checkpoints": ("id", "tree_size", "root", "at", "key_id", "signature"),
    "audit_signing_keys": ("key_id", "algorithm", "public_key", "first_used"),
}


def test_the_guide_describes_the_audit_tables_and_names_the_callback_tables_the_analyst_cannot_read() -> None:
    text = DOC.read_text()
    audit = text[text.index("## Audit tables") :]
    for table, columns in AUDIT_TABLES.items():
        assert f"`read.{table}`" in audit
        assert all(f"| `{column}` |" in audit for column in columns), table
    assert "| `chain_hash` |" in audit
    for table in PRIVATE_TABLES:
        assert f"`read.{table}`" in text, table


def open_every_projection(fresh_database: str) -> None:
    """Every projection's tables (and tracking table) exist, as in a running service."""
    for spec in PROJECTIONS:
        open_view(fresh_database, spec).datastore.close()


def test_every_table_the_analyst_can_read_is_described_with_every_column(
    fresh_database, make_view, analyst_name, tmp_path, monkeypatch
) -> None:
    make_view()
    open_every_projection(fresh_database)
    monkeypatch.setenv("DATABASE_URL", fresh_database)
    monkeypatch.setenv(VAR_ENV, str(tmp_path / "var"))
    with pytest.raises(SystemExit) as exit_:
        main(["analyst", "create-role", "--name", analyst_name, "--password", "pw"])
    assert exit_.value.code == 0
    text = DOC.read_text()
    with psycopg.connect(fresh_database) as conn:
        readable = readable_tables(conn, analyst_name)
        assert {"readmodels_tracking", "callbackoutbox_tracking", "auditchain_tracking"} <= set(readable)
        assert "projection_status" not in readable
        for table, columns in readable.items():
            assert f"`read.{table}`" in text, table
            missing = [column for column in columns if f"`{column}`" not in text]
            assert not missing, f"{table}: {missing}"


def readable_tables(conn: psycopg.Connection, role: str) -> dict[str, list[str]]:
    """The tables and views of the schema `read` that `role` may SELECT, with their columns."""
    rows = conn.execute(
        "SELECT c.relname, a.attname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
        "JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped "
        "WHERE n.nspname = 'read' AND c.relkind IN ('r', 'v', 'p', 'm') "
        "AND has_table_privilege(%s, c.oid, 'SELECT') ORDER BY c.relname, a.attnum",
        (role,),
    ).fetchall()
    found: dict[str, list[str]] = {}
    for table, column in rows:
        found.setdefault(table, []).append(column)
    return found


def test_every_example_query_runs_as_the_analyst(
    fresh_database,
    store_ledger,
    store_use_cases,
    clock,
    addresses,
    make_view,
    analyst_name,
    tmp_path,
    monkeypatch,
) -> None:
    populate(store_use_cases, clock, addresses)
    replay(store_ledger, READ_MODELS, make_view())
    audit_chain = open_view(fresh_database, by_name("AuditChain"))
    replay(store_ledger, by_name("AuditChain"), audit_chain)
    audit_chain.datastore.close()
    open_every_projection(fresh_database)
    monkeypatch.setenv("DATABASE_URL", fresh_database)
    monkeypatch.setenv(VAR_ENV, str(tmp_path / "var"))
    with pytest.raises(SystemExit) as exit_:
        main(["analyst", "create-role", "--name", analyst_name, "--password", "pw"])
    assert exit_.value.code == 0

    answered = 0
    with connect_as(fresh_database, analyst_name, "pw") as conn:
        for number, query in enumerate(sql_examples(), start=1):
            try:
                rows = conn.execute(query).fetchall()
            except Exception as error:
                pytest.fail(f"example {number} fails: {error}\n{query}")
            answered += bool(rows)
    assert answered >= len(sql_examples()) - 2  # nearly every example finds rows in the scenario
