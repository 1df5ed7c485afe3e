"""`broker-ledger analyst create-role`: a login role that reads the schema `read` and nothing else."""

from __future__ import annotations

import psycopg
import pytest

from projections.base.runner import open_view, replay
from projections.catalog import PROJECTIONS, by_name
from projections.status import record_failure
from tests.projections.conftest import connect_as
from tests.projections.support import run_cli as run


def test_the_analyst_role_reads_the_read_models_but_not_the_event_store(populated, analyst_name, capsys):
    assert run("analyst", "create-role", "--name", analyst_name, "--password", "pw-1") == 0
    assert f"role {analyst_name} created" in capsys.readouterr().out

    with connect_as(populated, analyst_name, "pw-1") as conn:
        assert conn.execute("SELECT count(*) FROM read.transactions").fetchone()[0] > 0
        assert conn.execute("SELECT count(*) FROM read.monthly_volumes").fetchone()[0] > 0
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("SELECT count(*) FROM ledger.ledger_events")
        with pytest.raises(psycopg.errors.ReadOnlySqlTransaction):
            conn.execute("DELETE FROM read.transactions")


@pytest.mark.parametrize(
    "table",
    [
        "callback_transactions",
        "callback_outbox",
        "callback_attempts",
        "callback_endpoints",
        "projection_status",
    ],
)
def test_the_analyst_role_cannot_read_partner_data_nor_free_text_errors(populated, analyst_name, table):
    assert run("analyst", "create-role", "--name", analyst_name, "--password", "pw-1") == 0
    with (
        connect_as(populated, analyst_name, "pw-1") as conn,
        pytest.raises(psycopg.errors.InsufficientPrivilege),
    ):
        conn.execute(f"SELECT count(*) FROM read.{table}")


def test_the_analyst_role_reads_the_audit_tables(populated, store_ledger, analyst_name):
    chain = by_name("AuditChain")
    view = open_view(populated, chain)
    replay(store_ledger, chain, view)
    view.datastore.close()
    counts = "SELECT (SELECT count(*) FROM read.audit_chain), (SELECT count(*) FROM read.audit_checkpoints)"
    with psycopg.connect(populated) as owner:
        kept = owner.execute(counts).fetchone()
    assert run("analyst", "create-role", "--name", analyst_name, "--password", "pw-1") == 0
    with connect_as(populated, analyst_name, "pw-1") as conn:
        seen = conn.execute(counts).fetchone()
    assert kept[0] > 0 and seen == kept, (
        f"the analyst sees {seen} rows of the chain and checkpoints, {kept} kept"
    )


def test_the_analyst_role_cannot_read_a_projection_failure_recorded_after_it(populated, analyst_name):
    assert run("analyst", "create-role", "--name", analyst_name, "--password", "pw-1") == 0
    record_failure(populated, "ReadModels", "cannot apply notification 7: customer alice-1 ...", 7)
    with (
        connect_as(populated, analyst_name, "pw-1") as conn,
        pytest.raises(psycopg.errors.InsufficientPrivilege),
    ):
        conn.execute("SELECT error FROM read.projection_status")


def test_the_analyst_role_reads_every_projections_position(populated, analyst_name):
    for spec in PROJECTIONS:
        open_view(populated, spec).datastore.close()
    assert run("analyst", "create-role", "--name", analyst_name, "--password", "pw-1") == 0
    with connect_as(populated, analyst_name, "pw-1") as conn:
        for spec in PROJECTIONS:
            conn.execute(f"SELECT notification_id FROM read.{spec.name.lower()}_tracking").fetchall()


def test_the_analyst_role_reads_tables_created_after_it(populated, analyst_name):
    assert run("analyst", "create-role", "--name", analyst_name, "--password", "pw-1") == 0
    with psycopg.connect(populated, autocommit=True) as owner:
        owner.execute("CREATE TABLE read.added_later AS SELECT 1 AS one")
    with connect_as(populated, analyst_name, "pw-1") as conn:
        assert conn.execute("SELECT one FROM read.added_later").fetchone()[0] == 1


def test_creating_the_role_again_updates_it_and_a_new_role_gets_a_generated_password(
    populated, analyst_name, capsys
):
    assert run("analyst", "create-role", "--name", analyst_name) == 0
    out = capsys.readouterr().out
    assert f"postgresql://{analyst_name}:" in out
    assert run("analyst", "create-role", "--name", analyst_name, "--password", "pw-2") == 0
    assert f"role {analyst_name} updated" in capsys.readouterr().out
    with connect_as(populated, analyst_name, "pw-2") as conn:
        assert conn.execute("SELECT count(*) FROM read.customers").fetchone()[0] == 3


def test_a_role_name_that_is_not_plain_is_refused(populated, capsys):
    assert run("analyst", "create-role", "--name", 'x"; DROP TABLE y; --') == 2
    assert "not a plain role name" in capsys.readouterr().err
