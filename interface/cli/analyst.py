"""`broker-ledger analyst create-role`: the read-only role analysts connect with (see docs/analytics.md).

The role may log in and read every table and view of the schema `read` (also those created later), and
nothing else: no access to the event store (`ledger`), the API's tables (`api`), the callback tables of
`read` (payloads, URLs and receivers' answers are partner data an analyst does not need) or
`read.projection_status` (its `error` is free text that may quote an event's partner data; how far each
projection has come is in the `*_tracking` tables, which the role reads), and its sessions are read-only.

With `--partner P` the role sees P's rows only: it is recorded in `read.analyst_partners`, which every
table's row-level security policy reads (`projections.partner_policies`), and it may read only the tables
under a policy, the views that read as the querying role and the projections' positions, each granted by
name (a table created later is not readable by it until the command runs again: nothing without a policy
reaches it). Without `--partner` the role sees every partner's rows, as the operator's analysts do.

Nor may it hold up the service: it takes no advisory lock (in the service's database only the service's role
may, `application.store.advisory_locks`), its sessions start with a statement timeout, a lock timeout and an
idle-in-transaction timeout (defaults it could change in its own session: they stop a forgotten query, not a
hostile one, which its privileges stop), and it has a connection limit, so it cannot use up the server's
connections the service needs to start.
"""

from __future__ import annotations

import re
import secrets
from dataclasses import dataclass
from typing import Annotated, Any

import psycopg
from cyclopts import App, Parameter
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict

from application.store.advisory_locks import LocksNotReserved, lock_functions_of, reserve_for
from application.store.database import build_url, redact
from interface.cli.main import database_url, fail
from interface.environment import Environment
from projections.callbacks.outbox import ATTEMPTS, ENDPOINTS, OUTBOX, STATES
from projections.catalog import PROJECTIONS
from projections.partner_policies import ANALYST_PARTNERS, under_policy
from projections.postgres import READ_SCHEMA
from projections.runner import open_view
from projections.status import create_table as create_status_table

app = App(name="analyst", help="The read-only database role for analysts.")
ROLE_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,62}\Z")
PRIVATE_SCHEMAS = ("ledger", "api")
# of the schema `read`: the callbacks' partner data, and the projections' failures (free-text errors)
PRIVATE_TABLES = (STATES, OUTBOX, ATTEMPTS, ENDPOINTS, "projection_status")
LOCK_TIMEOUT_SECONDS = 10  # a statement of the role waits at most this long for a lock
IDLE_IN_TRANSACTION_SECONDS = 60  # a session that leaves a transaction open and idle longer is ended


class RoleRefused(Exception):
    """The role cannot be given what it needs, or could do more than it should."""


@app.command(name="create-role")
def create_role(
    *,
    name: Annotated[str, Parameter(help="Name of the role.")] = "analyst",
    password: Annotated[
        str | None,
        Parameter(help="Its password; default: generated for a new role, kept for an existing one."),
    ] = None,
    statement_timeout: Annotated[
        int, Parameter(help="Seconds a statement of the role may run before it is cancelled.")
    ] = 300,
    connections: Annotated[int, Parameter(help="Connections the role may hold at once.")] = 5,
    partner: Annotated[
        str | None,
        Parameter(help="The partner whose rows alone the role sees; default: every partner's rows."),
    ] = None,
) -> int:
    """Create (or update) a LOGIN role that can read the schema `read` and nothing else: no advisory locks
    (the only role that may take one is the service's: this takes a superuser once, see docs/analytics.md),
    statements cancelled after --statement-timeout seconds, at most --connections connections; with
    --partner, it sees that partner's rows only (row-level security)."""
    if not ROLE_NAME.match(name):
        return fail(f"{name!r} is not a plain role name (lower-case letters, digits and _)")
    if statement_timeout < 1 or connections < 1:
        return fail("--statement-timeout and --connections must be at least 1")
    if partner is not None and not partner:
        return fail("--partner must name a partner")
    url = database_url(Environment.read())
    positions = open_read_schema(url)
    with psycopg.connect(url, autocommit=True) as conn:
        service = str(conn.execute("SELECT current_user").fetchone()[0])
        if service == name:
            return fail(f"{name!r} is the service's own role; choose another name")
        existed = conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (name,)).fetchone() is not None
        if password is None and not existed:
            password = secrets.token_urlsafe(18)
        limits = Limits(statement_timeout, connections)
        try:
            with conn.transaction():
                for statement in grants(name, password, existed, conn.info.dbname, limits):
                    conn.execute(statement)
                for statement in partner_scope(conn, name, partner, positions):
                    conn.execute(statement)
                keep_locks_from(conn, name, service)
        except (LocksNotReserved, RoleRefused) as refusal:
            return fail(f"role {name} not {'updated' if existed else 'created'}: {refusal}")
    params = conninfo_to_dict(url)
    params.update(user=name, password=password)
    done = "updated" if existed else "created"
    rows = "every partner's rows" if partner is None else f"the rows of partner {partner!r} only"
    print(
        f"role {name} {done}: SELECT on every table and view of the schema {READ_SCHEMA} but the callback "
        f"tables and projection_status, {rows}, nothing else; no advisory locks, statements cancelled "
        f"after {statement_timeout} s, at most {connections} connections"
    )
    if password is not None:
        print(f'connect with: psql "{build_url(params)}"')
    else:
        print(f'connect with: psql "{redact(build_url({**params, "password": "<its password>"}))}"')
    return 0


def open_read_schema(url: str) -> list[str]:
    """Opens every projection's view, so that the read schema's tables, with their policies, exist before
    the grants, and the table of projections' failures, which the grants exclude (created later, the
    default privileges would let it be read); returns the projections' tracking tables."""
    positions = []
    for spec in PROJECTIONS:
        view = open_view(url, spec)
        positions.append(view.tracking_table_name)
        view.datastore.close()
    create_status_table(url)
    return positions


@dataclass(frozen=True)
class Limits:
    """How long a statement of the role may run, and how many connections it may hold."""

    statement_seconds: int
    connections: int

    def settings(self) -> dict[str, str]:
        """The role's session defaults: read-only, and no wait, statement or idle transaction without end."""
        return {
            "default_transaction_read_only": "on",
            "statement_timeout": f"{self.statement_seconds}s",
            "lock_timeout": f"{LOCK_TIMEOUT_SECONDS}s",
            "idle_in_transaction_session_timeout": f"{IDLE_IN_TRANSACTION_SECONDS}s",
        }


def keep_locks_from(conn: psycopg.Connection[Any], name: str, service: str) -> None:
    """Only the service's role may take advisory locks in its database (`conn`'s); `name` may not take one,
    not even through a grant of its own or of a role it belongs to."""
    reserve_for(conn, service)
    able = lock_functions_of(conn, name)
    if able:
        raise RoleRefused(
            f"it could still take advisory locks ({', '.join(able)}), through a grant of its own or of a "
            f"role it belongs to; revoke that grant first"
        )


def grants(name: str, password: str | None, existed: bool, dbname: str, limits: Limits) -> list[sql.Composed]:
    role, schema = sql.Identifier(name), sql.Identifier(READ_SCHEMA)
    attributes = sql.SQL(
        "LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS CONNECTION LIMIT {}"
    ).format(sql.Literal(limits.connections))
    if password is not None:
        attributes = sql.SQL("{} PASSWORD {}").format(attributes, sql.Literal(password))
    verb = sql.SQL("ALTER ROLE" if existed else "CREATE ROLE")
    statements = [sql.SQL("{} {} {}").format(verb, role, attributes)]
    statements += [
        sql.SQL("ALTER ROLE {} SET {} = {}").format(role, sql.Identifier(setting), sql.Literal(value))
        for setting, value in limits.settings().items()
    ]
    statements += [
        sql.SQL("GRANT CONNECT ON DATABASE {} TO {}").format(sql.Identifier(dbname), role),
        sql.SQL("GRANT USAGE ON SCHEMA {} TO {}").format(schema, role),
        sql.SQL("GRANT SELECT ON ALL TABLES IN SCHEMA {} TO {}").format(schema, role),
        sql.SQL("ALTER DEFAULT PRIVILEGES IN SCHEMA {} GRANT SELECT ON TABLES TO {}").format(schema, role),
    ]
    statements += [
        sql.SQL("REVOKE ALL ON {} FROM {}").format(sql.Identifier(READ_SCHEMA, table), role)
        for table in PRIVATE_TABLES
    ]
    for private in PRIVATE_SCHEMAS:
        statements += [
            sql.SQL(
                "DO $$ BEGIN IF EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = {0}) THEN "
                "EXECUTE format('REVOKE ALL ON ALL TABLES IN SCHEMA %I FROM %I', {0}, {1}); "
                "EXECUTE format('REVOKE ALL ON SCHEMA %I FROM %I', {0}, {1}); END IF; END $$"
            ).format(sql.Literal(private), sql.Literal(name))
        ]
    return statements


def partner_scope(
    conn: psycopg.Connection[Any], name: str, partner: str | None, positions: list[str]
) -> list[sql.Composed]:
    """What makes `name` a role of one partner (`partner`), after `grants`: recorded in the table the
    policies read, and SELECT on the relations under a policy and the projections' `positions` only, no
    table created later (it would have no policy, maybe); or, without a partner, a role of every partner."""
    role, schema = sql.Identifier(name), sql.Identifier(READ_SCHEMA)
    mapping = sql.Identifier(READ_SCHEMA, ANALYST_PARTNERS)
    if partner is None:
        return [sql.SQL("DELETE FROM {} WHERE role_name = {}").format(mapping, sql.Literal(name))]
    readable = [*under_policy(conn, READ_SCHEMA), *positions]
    return [
        sql.SQL(
            "INSERT INTO {} (role_name, partner) VALUES ({}, {}) "
            "ON CONFLICT (role_name) DO UPDATE SET partner = EXCLUDED.partner"
        ).format(mapping, sql.Literal(name), sql.Literal(partner)),
        sql.SQL("ALTER DEFAULT PRIVILEGES IN SCHEMA {} REVOKE SELECT ON TABLES FROM {}").format(schema, role),
        sql.SQL("REVOKE ALL ON ALL TABLES IN SCHEMA {} FROM {}").format(schema, role),
        sql.SQL("GRANT SELECT ON {} TO {}").format(
            sql.SQL(", ").join(sql.Identifier(READ_SCHEMA, table) for table in readable), role
        ),
    ]
