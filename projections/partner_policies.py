"""Row-level security of the read schema: an analyst of one partner sees that partner's rows only.

`broker-ledger analyst create-role --partner P` records its role in `analyst_partners` (role name ->
partner). Every table of the read schema that holds partners' rows carries a policy, declared with the
table itself (so a table created or created again later has it too):

- a partner's table (`partner_rows`): a role recorded in `analyst_partners` sees the rows of its partner,
  any other role (the all-partners analyst; the service, which owns the tables and is not subject to its
  own tables' policies anyway) every row;
- a table of the whole ledger (`whole_ledger_rows`: the audit chain, the postings' memory of open deals,
  whose rows are no one partner's): a recorded role sees no row, any other every row.

A view reads its tables as the role that queries it (`security_invoker`), or its owner's rights would
bypass the policies. `analyst_partners` has a policy of its own: a role sees its own row only, so no
analyst learns another's partner (a role setting would not do: any role reads `pg_db_role_setting`, and a
session may change its own settings).

The statements look before they change anything: `ALTER TABLE ... ENABLE ROW LEVEL SECURITY` and
`CREATE POLICY` lock their table, and every process that opens a view runs its create statements on live
tables (`projections.base.postgres`); once in place, they take no lock.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from psycopg import Connection
from psycopg.sql import SQL, Composed, Identifier, Literal

ANALYST_PARTNERS = "analyst_partners"
PARTNER_POLICY = "partner_rows"
WHOLE_LEDGER_POLICY = "whole_ledger_rows"
OWN_ROW_POLICY = "own_row"
EVERY_ROW_POLICY = "every_row"

MAPPING = """CREATE TABLE IF NOT EXISTS {mapping} (
    role_name name PRIMARY KEY,
    partner text NOT NULL)"""
# the recorded partner of the role that runs the query, or NULL (an InitPlan: looked up once per query)
PARTNER_OF_ROLE = "(SELECT a.partner FROM {mapping} AS a WHERE a.role_name = current_user)"
ROLE_RECORDED = "EXISTS (SELECT FROM {mapping} AS a WHERE a.role_name = current_user)"


def mapping_statements(table: Callable[[str], Identifier]) -> list[Composed]:
    """The table of per-partner analysts, each role reading its own row only: every policy reads it."""
    mapping = table(ANALYST_PARTNERS)
    return [
        SQL(MAPPING).format(mapping=mapping),
        _policy(mapping, OWN_ROW_POLICY, SQL("role_name = current_user")),
        # any role that reads a table with a policy reads this one (the policies' subqueries run as it);
        # granted once: a GRANT updates the table's catalog row even when it changes nothing
        SQL(
            "DO $grant$ BEGIN IF NOT has_table_privilege('public', {name}, 'SELECT') "
            "THEN GRANT SELECT ON {mapping} TO PUBLIC; END IF; END $grant$"
        ).format(name=Literal(mapping.as_string()), mapping=mapping),
    ]


def partner_rows(table: Callable[[str], Identifier], name: str, column: str = "partner") -> Composed:
    """The policy of a partner's table `name`: a recorded role sees its partner's rows, others all rows."""
    mapping = table(ANALYST_PARTNERS)
    partner = Identifier(column)
    rows = SQL("{} = coalesce(" + PARTNER_OF_ROLE + ", {})").format(partner, partner, mapping=mapping)
    return _policy(table(name), PARTNER_POLICY, rows)


def whole_ledger_rows(table: Callable[[str], Identifier], name: str) -> Composed:
    """The policy of a table of no one partner's rows: a recorded role sees none, others all rows."""
    rows = SQL("NOT " + ROLE_RECORDED).format(mapping=table(ANALYST_PARTNERS))
    return _policy(table(name), WHOLE_LEDGER_POLICY, rows)


def every_row(table: Callable[[str], Identifier], name: str) -> Composed:
    """The policy of a table of every analyst's rows (the dimensions: `projections.dimensions`): every role
    sees all its rows, and an analyst of one partner may be granted it as a table under a policy."""
    return _policy(table(name), EVERY_ROW_POLICY, SQL("true"))


def _policy(table: Identifier, policy: str, rows: Composed | SQL) -> Composed:
    """A DO block that creates the policy `policy` on `table` (for every command: a role the service writes
    as, if not the owner, keeps writing) and enables row-level security there, each only if not done yet."""
    return SQL(
        "DO $policy$ BEGIN "
        "IF NOT EXISTS (SELECT FROM pg_policy WHERE polrelid = {name}::regclass AND polname = {policy_name}) "
        "THEN CREATE POLICY {policy} ON {table} USING ({rows}); END IF; "
        "IF NOT (SELECT relrowsecurity FROM pg_class WHERE oid = {name}::regclass) "
        "THEN ALTER TABLE {table} ENABLE ROW LEVEL SECURITY; END IF; "
        "END $policy$"
    ).format(
        name=Literal(table.as_string()),
        policy_name=Literal(policy),
        policy=Identifier(policy),
        table=table,
        rows=rows,
    )


# the relations of a schema whose rows a per-partner analyst may read as they are: tables under a policy,
# views that read as the querying role
UNDER_POLICY = """SELECT c.relname FROM pg_class AS c
WHERE c.relnamespace = %(schema)s::regnamespace AND (
    (c.relkind IN ('r', 'p') AND c.relrowsecurity
     AND EXISTS (SELECT FROM pg_policy AS p WHERE p.polrelid = c.oid))
    OR (c.relkind = 'v' AND 'security_invoker=true' = ANY (c.reloptions)))
ORDER BY c.relname"""


def under_policy(conn: Connection[Any], schema: str) -> list[str]:
    """The tables of `schema` under a policy and its views that read as the querying role: all a role of
    one partner may read but the partner-free tables (the projections' positions)."""
    return [str(row[0]) for row in conn.execute(UNDER_POLICY, {"schema": schema}).fetchall()]
