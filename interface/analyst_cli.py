"""`broker-ledger analyst create-role`: the read-only role analysts connect with (see docs/analytics.md).

The role may log in and read every table and view of the schema `read` (also those created later), and
nothing else: no access to the event store (`ledger`), the API's tables (`api`), the callback tables of
`read` (payloads, URLs and receivers' answers are partner data an analyst does not need) or
`read.projection_status` (its `error` is free text that may quote an event's partner data; how far each
projection has come is in the `*_tracking` tables, which the role reads), and its sessions are read-only.
"""

from __future__ import annotations

import re
import secrets
from typing import Annotated

import psycopg
from cyclopts import App, Parameter
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict

from application.credentials import var_dir
from application.store.database import build_url, redact, resolve_database_url
from interface.cli import fail
from projections.callbacks.outbox import ATTEMPTS, ENDPOINTS, OUTBOX, STATES
from projections.catalog import CALLBACK_OUTBOX, READ_MODELS
from projections.postgres import READ_SCHEMA
from projections.runner import open_view
from projections.status import create_table as create_status_table

app = App(name="analyst", help="The read-only database role for analysts.")
ROLE_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")
PRIVATE_SCHEMAS = ("ledger", "api")
# of the schema `read`: the callbacks' partner data, and the projections' failures (free-text errors)
PRIVATE_TABLES = (STATES, OUTBOX, ATTEMPTS, ENDPOINTS, "projection_status")


@app.command(name="create-role")
def create_role(
    *,
    name: Annotated[str, Parameter(help="Name of the role.")] = "analyst",
    password: Annotated[
        str | None,
        Parameter(help="Its password; default: generated for a new role, kept for an existing one."),
    ] = None,
) -> int:
    """Create (or update) a LOGIN role that can read the schema `read` and nothing else."""
    if not ROLE_NAME.match(name):
        return fail(f"{name!r} is not a plain role name (lower-case letters, digits and _)")
    url = resolve_database_url(var_dir())
    for spec in (READ_MODELS, CALLBACK_OUTBOX):  # the read schema and its tables exist before the grants
        open_view(url, spec).datastore.close()
    create_status_table(url)  # excluded below; created later, the default privileges would let it be read
    with psycopg.connect(url, autocommit=True) as conn:
        if conn.execute("SELECT current_user").fetchone()[0] == name:
            return fail(f"{name!r} is the service's own role; choose another name")
        existed = conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (name,)).fetchone() is not None
        if password is None and not existed:
            password = secrets.token_urlsafe(18)
        with conn.transaction():
            for statement in grants(name, password, existed, conn.info.dbname):
                conn.execute(statement)
    params = conninfo_to_dict(url)
    params.update(user=name, password=password)
    done = "updated" if existed else "created"
    print(
        f"role {name} {done}: SELECT on every table and view of the schema {READ_SCHEMA} but the callback "
        "tables and projection_status, nothing else"
    )
    if password is not None:
        print(f'connect with: psql "{build_url(params)}"')
    else:
        print(f'connect with: psql "{redact(build_url({**params, "password": "<its password>"}))}"')
    return 0


def grants(name: str, password: str | None, existed: bool, dbname: str) -> list[sql.Composed]:
    role, schema = sql.Identifier(name), sql.Identifier(READ_SCHEMA)
    attributes = sql.SQL("LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS")
    if password is not None:
        attributes = sql.SQL("{} PASSWORD {}").format(attributes, sql.Literal(password))
    verb = sql.SQL("ALTER ROLE" if existed else "CREATE ROLE")
    statements = [
        sql.SQL("{} {} {}").format(verb, role, attributes),
        sql.SQL("ALTER ROLE {} SET default_transaction_read_only = on").format(role),
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
