"""`broker-ledger analyst create-role --partner P`: a role whose every query sees P's rows only.

A database holds two partners' data (the scenario's `demo` and `other`, with every projection replayed);
a corpus of queries runs as the role of `other`: each answer must hold no `demo` row and none of `demo`'s
values (its codes, ids, addresses), whatever way it asks: a direct select of every table and view, joins,
aggregates, functions, `COPY`, the catalog, conditions that fail or print, writes.
"""

from __future__ import annotations

import re
from pathlib import Path

import psycopg
import pytest

from interface.cli.analyst import PRIVATE_TABLES
from projections.base.runner import open_view, replay
from projections.catalog import PROJECTIONS, by_name
from projections.dimensions import DIMENSION_TABLES, DIMENSION_VIEWS
from projections.partner_policies import under_policy
from tests.projections.conftest import connect_as
from tests.projections.support import run_cli as run

PARTNER, HIDDEN = "other", "demo"  # the role's partner; the partner it must not see
DOC = Path(__file__).resolve().parents[2] / "docs" / "analytics.md"
WHOLE_LEDGER = ("audit_chain", "audit_checkpoints", "posting_deals", "merkle_nodes")
HIDDEN_VALUES = """SELECT transaction_code FROM read.transactions WHERE partner = %(p)s
UNION SELECT id::text FROM read.transactions WHERE partner = %(p)s
UNION SELECT id::text FROM read.customers WHERE partner = %(p)s
UNION SELECT id::text FROM read.accounts WHERE partner = %(p)s
UNION SELECT deposit_address FROM read.accounts WHERE partner = %(p)s
UNION SELECT chain_hash FROM read.audit_chain"""

CORPUS = {
    "join": """SELECT t.partner, t.transaction_code, h.to_status FROM read.transaction_status_history h
        JOIN read.transactions t USING (partner, transaction_code)""",
    "join on the view": """SELECT c.partner, c.customer_code, v.month, v.fiat_value FROM read.customers c
        LEFT JOIN read.monthly_volumes v USING (partner, customer_code)""",
    "cross join": """SELECT a.partner, b.partner, b.transaction_code
        FROM read.customers a, read.transactions b""",
    "aggregates": """SELECT partner, count(*), sum(fiat_value), string_agg(transaction_code, ','),
        array_agg(id) FROM read.transactions GROUP BY partner""",
    "aggregates of the books": """SELECT count(*), sum(debit), string_agg(DISTINCT partner, ','),
        string_agg(DISTINCT transaction_code, ',') FROM read.postings""",
    "every row as json": "SELECT json_agg(t) FROM read.transactions t",
    "subquery": """SELECT * FROM read.balances WHERE partner IN (SELECT DISTINCT partner FROM read.postings)
        OR partner = 'demo'""",
    "asking for the hidden partner": "SELECT * FROM read.transactions WHERE partner = 'demo'",
    "union of tables": """SELECT partner, customer_code FROM read.customers
        UNION ALL SELECT partner, account_code FROM read.accounts
        UNION ALL SELECT partner, name FROM read.reserve_places""",
    "window": "SELECT partner, count(*) OVER () FROM read.daily_volumes",
    "recursive": """WITH RECURSIVE r AS (SELECT partner, transaction_code, 1 AS n FROM read.transactions
        UNION ALL SELECT partner, transaction_code, n + 1 FROM r WHERE n < 2) SELECT * FROM r""",
    "the chain and the deals": "SELECT * FROM read.audit_chain, read.posting_deals",
    "the partners' table": "SELECT * FROM read.analyst_partners",
    "settings": """SELECT current_setting('broker_ledger.partner', true), current_user, session_user,
        current_setting('row_security')""",
    "the catalog's statistics": """SELECT tablename, attname, most_common_vals::text, histogram_bounds::text
        FROM pg_stats WHERE schemaname = 'read'""",
    "other sessions' queries": "SELECT query FROM pg_stat_activity",
}
REFUSED = {
    "pg_read_file": "SELECT pg_read_file('base/1/1259')",
    "the raw statistics": "SELECT * FROM pg_statistic",
    "the event store": "SELECT * FROM ledger.ledger_events",
    "a callback table": "SELECT * FROM read.callback_outbox",
    "a projection's failures": "SELECT * FROM read.projection_status",
    "row security off": "SET row_security = off; SELECT * FROM read.transactions",
    "another role": "SET ROLE postgres",
    "another session user": "SET SESSION AUTHORIZATION postgres",
    "COPY to a file": "COPY read.transactions TO '/tmp/leak.csv'",
    "insert": "INSERT INTO read.customers SELECT * FROM read.customers",
    "update": "UPDATE read.transactions SET partner = partner",
    "delete": "DELETE FROM read.postings",
    "another partner": "UPDATE read.analyst_partners SET partner = 'demo'",
    "every partner": "DELETE FROM read.analyst_partners",
}


@pytest.fixture
def two_partners(populated, store_ledger) -> str:
    """`populated` with every projection replayed, and statistics of every table (`ANALYZE`)."""
    for spec in PROJECTIONS:
        view = open_view(populated, spec)
        if spec.name in ("Postings", "AuditChain", "MerkleTree", "EventsFeed"):
            replay(store_ledger, by_name(spec.name), view)
        view.datastore.close()
    with psycopg.connect(populated, autocommit=True) as owner:
        owner.execute("ANALYZE")
    return populated


@pytest.fixture
def partner_role(two_partners, analyst_name) -> str:
    """The role of `PARTNER`, password pw-1."""
    assert (
        run("analyst", "create-role", "--name", analyst_name, "--password", "pw-1", "--partner", PARTNER) == 0
    )
    return analyst_name


def hidden_values(url: str) -> set[str]:
    with psycopg.connect(url) as owner:
        values = {str(row[0]) for row in owner.execute(HIDDEN_VALUES, {"p": HIDDEN}).fetchall()}
    assert len(values) > 20
    return values | {HIDDEN}


def leaks(text: str, hidden: set[str]) -> list[str]:
    return sorted(value for value in hidden if re.search(rf"\b{re.escape(value)}\b", text))


def rows_of(conn: psycopg.Connection, query: str, *params: str) -> list[tuple]:
    return sorted(conn.execute(query, params).fetchall(), key=repr)


def test_every_table_and_view_shows_the_partners_rows_and_no_other(two_partners, partner_role):
    with connect_as(two_partners, partner_role, "pw-1") as role, psycopg.connect(two_partners) as owner:
        readable = under_policy(owner, "read")
        assert {"customers", "transactions", "monthly_volumes", "postings", "balances"} <= set(readable)
        for table in readable:
            seen = rows_of(role, f"SELECT * FROM read.{table}")
            if table in WHOLE_LEDGER:
                assert seen == [] and rows_of(owner, f"SELECT * FROM read.{table}"), table
            elif table == "analyst_partners":
                assert seen == [(partner_role, PARTNER)]
            elif table in (*DIMENSION_TABLES, *DIMENSION_VIEWS):  # every analyst's rows, no partner's
                assert seen == rows_of(owner, f"SELECT * FROM read.{table}"), table
            else:
                assert seen or table == "reserve_places", table  # (the scenario names no reserve)
                assert seen == rows_of(owner, f"SELECT * FROM read.{table} WHERE partner = %s", PARTNER), (
                    table
                )
        for spec in PROJECTIONS:  # the positions, of no partner
            assert role.execute(f"SELECT notification_id FROM read.{spec.name.lower()}_tracking").fetchall()
        # the projections declare a policy with each of their tables: every table and view of the schema
        # is under one, or a position, or closed to analysts
        positions = {f"{spec.name.lower()}_tracking" for spec in PROJECTIONS}
        assert relations(owner) - set(readable) - positions - set(PRIVATE_TABLES) == set()


def relations(conn: psycopg.Connection) -> set[str]:
    """The tables and views of the schema `read`."""
    kinds = (
        "SELECT relname FROM pg_class WHERE relnamespace = 'read'::regnamespace "
        "AND relkind IN ('r', 'p', 'v', 'm', 'f')"
    )
    return {str(row[0]) for row in conn.execute(kinds).fetchall()}


def test_no_query_of_the_corpus_shows_the_other_partners_values(two_partners, partner_role):
    hidden = hidden_values(two_partners)
    with connect_as(two_partners, partner_role, "pw-1") as role:
        for name, query in CORPUS.items():
            rows = role.execute(query).fetchall()
            assert not leaks(repr(rows), hidden), name
        assert role.execute(CORPUS["aggregates"]).fetchall()[0][0] == PARTNER
        positions = {f"{spec.name.lower()}_tracking" for spec in PROJECTIONS}
        assert {row[0] for row in role.execute(CORPUS["the catalog's statistics"])} <= positions
        for copy in (
            "COPY read.transactions TO STDOUT",
            "COPY (SELECT * FROM read.monthly_volumes) TO STDOUT",
        ):
            with role.cursor().copy(copy) as out:
                text = b"".join(bytes(block) for block in out).decode()
            assert PARTNER in text and not leaks(text, hidden), copy


def refusal(role: psycopg.Connection, statement: str) -> type[Exception] | None:
    try:
        role.execute(statement)
    except psycopg.Error as error:
        return type(error)
    return None


def test_conditions_run_after_the_policy_and_what_the_role_may_not_do_is_refused(two_partners, partner_role):
    """Functions of a query (a cast that fails with its value, a function that prints its arguments) see
    only the rows the policy lets through: their errors and notices quote none of the other partner's. The
    role's writes, files, temporary objects, other roles and the policies' off switch are refused by its
    privileges (its sessions' read-only default is off here, which it may change); so the function that
    prints is created by the owner."""
    hidden = hidden_values(two_partners)
    notices: list[str] = []
    tell = (
        "CREATE FUNCTION {}.tell(text) RETURNS boolean LANGUAGE plpgsql COST 0.0001 "
        "AS $$ BEGIN RAISE NOTICE 'saw %', $1; RETURN true; END $$"
    )
    with psycopg.connect(two_partners, autocommit=True) as owner:
        owner.execute(tell.format("public"))
    with connect_as(two_partners, partner_role, "pw-1") as role:
        role.add_notice_handler(lambda notice: notices.append(str(notice.message_primary)))
        with pytest.raises(psycopg.errors.InvalidTextRepresentation) as failed:
            role.execute("SELECT * FROM read.transactions WHERE (transaction_code || id)::int > 0")
        assert not leaks(str(failed.value), hidden)
        role.execute("SET default_transaction_read_only = off")
        assert refusal(role, tell.format("pg_temp")) is psycopg.errors.InsufficientPrivilege
        role.execute("SELECT count(*) FROM read.transactions WHERE public.tell(transaction_code || partner)")
        role.execute("SELECT count(*) FROM read.postings WHERE public.tell(partner || account)")
        refused = {name: refusal(role, statement) for name, statement in REFUSED.items()}
    assert notices and not leaks(" ".join(notices), hidden)
    assert {name for name, error in refused.items() if error is None} == set()
    allowed = (psycopg.errors.InsufficientPrivilege, psycopg.errors.UndefinedTable)
    assert {name: error for name, error in refused.items() if not issubclass(error, allowed)} == {}


def test_the_guides_example_answers_each_role_for_its_partner(two_partners, partner_role, capsys):
    """The example of docs/analytics.md; a table added later stays closed to the partner's role; the role
    made one of every partner again sees both, and the whole ledger's tables."""
    section = DOC.read_text().split("### An analyst of one partner", 1)[1]
    query = re.search(r"```sql\n(.*?)```", section, re.DOTALL).group(1)
    with psycopg.connect(two_partners, autocommit=True) as owner:
        owner.execute("CREATE TABLE read.added_later AS SELECT 'demo' AS partner")
    with connect_as(two_partners, partner_role, "pw-1") as role:
        assert {row[0] for row in role.execute(query).fetchall()} == {PARTNER}
        assert refusal(role, "SELECT * FROM read.added_later") is psycopg.errors.InsufficientPrivilege
    assert run("analyst", "create-role", "--name", partner_role) == 0  # every partner again
    assert "every partner's rows" in capsys.readouterr().out
    with connect_as(two_partners, partner_role, "pw-1") as role:
        assert {row[0] for row in role.execute(query).fetchall()} == {PARTNER, HIDDEN}
        assert role.execute("SELECT count(*) FROM read.audit_chain").fetchone()[0] > 0
        assert role.execute("SELECT partner FROM read.added_later").fetchall() == [(HIDDEN,)]
