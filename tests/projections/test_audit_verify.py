"""`verify`: every projection of the catalog equals a fresh rebuild at its own position, postings balance, and
the audit chain matches the log; a changed read-model row, an unbalanced posting or a tampered event fails."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from psycopg import sql

from projections.audit import Report, check_postings, open_view, verify
from projections.base.postgres import READ_SCHEMA
from projections.catalog import PROJECTIONS
from tests.projections.audit_support import (
    Flows,
    catch_up,
    named_in,
    new_ledger,
    own_database,
    query,
    stored_event,
)

NAMES = [spec.name for spec in PROJECTIONS]


@pytest.fixture(scope="module")
def three_lives(database_url: str) -> Iterator[str]:
    """A database with three customers' lives, every projection of the catalog caught up; each test gets
    a copy."""
    with own_database(database_url) as url:
        ledger = new_ledger(url)
        try:
            Flows(ledger).lives(3)
        finally:
            ledger.close()
        catch_up(url)
        yield url


@pytest.fixture
def live(database_url: str, three_lives: str) -> Iterator[str]:
    with own_database(database_url, template=three_lives) as url:
        yield url


def check(report: Report, name: str):
    [found] = [check for check in report.checks if check.name == name]
    return found


def test_verify_passes_on_an_untouched_log_and_leaves_no_schema_behind(live):
    report = verify(live)
    assert report.ok, [(c.name, c.details) for c in report.checks]
    assert [c.name for c in report.checks] == [
        *(f"read model {name}" for name in NAMES),
        "postings balance",
        "audit chain",
        "merkle tree",
        "projections keep up",
    ]
    assert "AuditChain" in NAMES
    assert not query(live, "SELECT nspname FROM pg_namespace WHERE nspname LIKE 'audit%'")


def test_a_live_view_behind_the_log_is_compared_at_its_own_position(live):
    position = query(live, "SELECT max(notification_id) AS n FROM ledger.ledger_events")[0]["n"]
    ledger = new_ledger(live)
    Flows(ledger, prefix="d").lives(1)
    ledger.close()
    report = verify(live)
    assert report.ok, [(c.name, c.details) for c in report.checks]
    assert f"at position {position} (log head {position + 1}" not in str(report.checks)
    assert (
        f"equal to a rebuild at position {position} (log head"
        in check(report, "read model AuditChain").details[0]
    )


def test_a_changed_row_of_the_audit_chain_read_model_fails_its_rebuild_comparison(live):
    victim = stored_event(live, "Transaction.Committed")
    query(
        live,
        "UPDATE read.audit_chain SET topic = 'domain.transaction:Transaction.Cancelled' "
        "WHERE notification_id = %s",
        victim["notification_id"],
    )
    report = verify(live)
    assert not report.ok
    failed = check(report, "read model AuditChain")
    assert failed.status == "FAILED"
    text = "\n".join(failed.details)
    assert "read.audit_chain: live" in text
    assert "only live:" in text and "Transaction.Cancelled" in text
    assert "only rebuilt:" in text and "Transaction.Committed" in text
    assert all(
        c.status != "FAILED" for c in report.checks if c.name.startswith("read model") and c is not failed
    )


@pytest.mark.parametrize("name", NAMES)
def test_a_row_deleted_from_any_read_model_fails_its_rebuild_comparison(live, name):
    [spec] = [spec for spec in PROJECTIONS if spec.name == name]
    view = open_view(live, spec)
    view.datastore.close()
    for table in view.tables:
        identifier = sql.Identifier(READ_SCHEMA, table)
        deleted = query(
            live,
            sql.SQL("DELETE FROM {0} WHERE ctid = (SELECT ctid FROM {0} LIMIT 1) RETURNING 1").format(
                identifier
            ),
        )
        if deleted:
            break
    else:
        pytest.fail(f"every table of {name} is empty after three customers' lives")
    report = verify(live, projections=[spec])
    assert check(report, f"read model {name}").status == "FAILED"
    assert f"{READ_SCHEMA}.{table}: live" in "\n".join(check(report, f"read model {name}").details)


def test_postings_are_checked_when_their_projection_exists(live):
    result = check_postings(live)
    if not query(live, "SELECT 1 FROM pg_tables WHERE schemaname = 'read' AND tablename = 'postings'"):
        assert result.status == "SKIPPED"
        assert result.details == ["skipped: no postings projection"]
        return
    assert result.status == "OK", result.details
    columns = {row["column_name"] for row in query(live, COLUMNS)}
    currency = "currency_code" if "currency_code" in columns else "currency"
    row = query(live, f"SELECT notification_id, {currency} AS c FROM read.postings WHERE debit > 0 LIMIT 1")[
        0
    ]
    query(
        live,
        f"UPDATE read.postings SET debit = debit + 0.01 WHERE ctid = (SELECT ctid FROM read.postings "
        f"WHERE notification_id = %s AND {currency} = %s AND debit > 0 LIMIT 1)",
        row["notification_id"],
        row["c"],
    )
    result = check_postings(live)
    assert result.status == "FAILED"
    assert f"currency {row['c']}: debits - credits = 0.01" in result.details
    assert f"notification {row['notification_id']}, {row['c']}: debits - credits = 0.01" in result.details


COLUMNS = (
    "SELECT column_name FROM information_schema.columns "
    "WHERE table_schema = 'read' AND table_name = 'postings'"
)


def test_postings_are_skipped_without_a_postings_projection(database_url):
    with own_database(database_url) as url:
        result = check_postings(url)
    assert (result.status, result.details) == ("SKIPPED", ["skipped: no postings projection"])


def test_an_event_that_no_longer_decodes_fails_verify_and_is_named(live):
    victim = stored_event(live, "Account.Opened")
    query(
        live,
        "UPDATE ledger.ledger_events SET state = convert_to('{\"tampered\": true}', 'UTF8') "
        "WHERE notification_id = %s",
        victim["notification_id"],
    )
    report = verify(live)
    assert not report.ok
    chain = check(report, "audit chain")
    assert chain.status == "FAILED"
    assert named_in(chain.details[0], victim)
    assert check(report, "read model AuditChain").status == "FAILED"
    assert not query(live, "SELECT nspname FROM pg_namespace WHERE nspname LIKE 'audit%'")
