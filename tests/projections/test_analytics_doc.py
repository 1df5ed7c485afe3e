"""Every SQL example of docs/analytics.md runs, as the analyst role, against populated read models."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from application.credentials import VAR_ENV
from interface.cli import main
from projections.analyst_cli import PRIVATE_TABLES
from projections.catalog import by_name
from projections.read_tables import TABLES, VIEWS
from projections.runner import open_view, replay
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


def test_every_example_query_runs_as_the_analyst(
    fresh_database, store_ledger, clock, addresses, make_view, analyst_name, tmp_path, monkeypatch
) -> None:
    populate(store_ledger, clock, addresses)
    replay(store_ledger, READ_MODELS, make_view())
    audit_chain = open_view(fresh_database, by_name("AuditChain"))
    replay(store_ledger, by_name("AuditChain"), audit_chain)
    audit_chain.datastore.close()
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
