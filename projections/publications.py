"""A partner's change feed for a warehouse: a logical replication publication of its rows of the read tables
(`broker-ledger analyst publication --partner P`; docs/analytics.md, "A change feed for the warehouse").

The publication holds every table of the read schema under the partner policy (`partner_rows`) whose
replica identity is its primary key and holds `partner`, with the row filter `partner = 'P'`, and the
dimension tables whole. PostgreSQL refuses an UPDATE or DELETE of a table published with a row filter on a
column outside its replica identity, for every writer: a table whose key does not start with its partner
(the postings, the chain reports, the events feed: keyed by position in the log) would stop the projection
that updates it, so it is left out and named (`left_out`). A table listed in `private` (the callbacks'
tables, which analysts may not read either) is never published.

Made again, the publication's tables are set anew (`ALTER PUBLICATION ... SET TABLE`): a table added to the
read schema since joins it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg.sql import SQL, Composed, Identifier, Literal

from projections.base.postgres import READ_SCHEMA
from projections.dimensions import DIMENSION_TABLES
from projections.partner_policies import PARTNER_POLICY

# the tables under the partner policy, and whether their replica identity (their primary key) holds `partner`
PARTNER_TABLES = """SELECT c.relname, c.relreplident = 'd' AND EXISTS (
    SELECT FROM pg_index AS i JOIN pg_attribute AS a ON a.attrelid = i.indrelid AND a.attnum = ANY (i.indkey)
    WHERE i.indrelid = c.oid AND i.indisprimary AND a.attname = 'partner') AS keyed
FROM pg_class AS c JOIN pg_policy AS p ON p.polrelid = c.oid AND p.polname = %(policy)s
WHERE c.relnamespace = %(schema)s::regnamespace AND c.relkind = 'r'
ORDER BY c.relname"""


@dataclass(frozen=True)
class Publication:
    """What `publish` made: its name, its tables with a row filter, those whole, and those left out."""

    name: str
    filtered: tuple[str, ...]
    whole: tuple[str, ...]
    left_out: tuple[str, ...]
    created: bool


def publish(
    conn: psycopg.Connection[Any],
    name: str,
    partner: str,
    private: tuple[str, ...],
    schema: str = READ_SCHEMA,
) -> Publication:
    """Creates the publication `name` of `partner`'s rows, or sets its tables anew if it exists."""
    rows = conn.execute(PARTNER_TABLES, {"policy": PARTNER_POLICY, "schema": schema}).fetchall()
    filtered = tuple(str(table) for table, keyed in rows if keyed and table not in private)
    left_out = tuple(str(table) for table, keyed in rows if not keyed and table not in private)
    whole = tuple(t for t in DIMENSION_TABLES if _exists(conn, schema, t))
    tables = [
        SQL("{} WHERE (partner = {})").format(Identifier(schema, table), Literal(partner))
        for table in filtered
    ]
    tables += [SQL("{}").format(Identifier(schema, table)) for table in whole]
    exists = conn.execute("SELECT FROM pg_publication WHERE pubname = %s", (name,)).fetchone() is not None
    conn.execute(statement(name, tables, exists))
    return Publication(name, filtered, whole, left_out, not exists)


def statement(name: str, tables: list[Composed], exists: bool) -> Composed:
    verb = "ALTER PUBLICATION {} SET TABLE {}" if exists else "CREATE PUBLICATION {} FOR TABLE {}"
    return SQL(verb).format(Identifier(name), SQL(", ").join(tables))


def _exists(conn: psycopg.Connection[Any], schema: str, table: str) -> bool:
    found = conn.execute("SELECT to_regclass(%s) IS NOT NULL", (f"{schema}.{table}",)).fetchone()
    return bool(found and found[0])


def wal_level(conn: psycopg.Connection[Any]) -> str:
    row = conn.execute("SHOW wal_level").fetchone()
    return str(row[0]) if row else ""
