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
idle-in-transaction timeout, defaults it could change in its own session, so the role is also recorded with
its limits in `read.analyst_limits` and the service's role made a member of it, and the service holds its
sessions to them whatever they set (`projections.analyst_watch`); a rebuild ends its sessions that hold a
lock it needs; and it has a connection limit, so it cannot use up the server's connections the service needs
to start. Its sessions are read-only by default, but a session may turn that off: what keeps it from
writing is that it has no privilege to (`writes_of` checks: no table, sequence or schema it may change, no
temporary tables).
"""

from __future__ import annotations

import contextlib
import re
import secrets
import sys
from dataclasses import dataclass
from typing import Annotated, Any

import psycopg
from cyclopts import App, Parameter
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict
from psycopg.rows import tuple_row

from application.store.advisory_locks import LocksNotReserved, lock_functions_of, reserve_for
from application.store.database import build_url, redact
from interface.cli.main import database_url, fail, settings_or_none, unknown_partner
from interface.environment import Environment
from projections.analyst_schema import prepare
from projections.analyst_watch import LIMITS_TABLE, limits_table, record_limits
from projections.base.postgres import READ_SCHEMA
from projections.base.runner import open_view
from projections.callbacks.outbox import ATTEMPTS, ENDPOINTS, OUTBOX, REDELIVERIES, STATES
from projections.callbacks.secrets import SECRETS
from projections.catalog import PROJECTIONS
from projections.dimensions import Dimensions
from projections.partner_policies import ANALYST_PARTNERS, under_policy
from projections.publications import publish, wal_level
from projections.status import create_table as create_status_table

app = App(name="analyst", help="The read-only database role for analysts.")
ROLE_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,62}\Z")
PRIVATE_SCHEMAS = ("ledger", "api")
# of the schema `read`: the callbacks' partner data, the projections' failures (free-text errors), and the
# analysts' limits (the service's to read)
CALLBACK_TABLES = (STATES, OUTBOX, ATTEMPTS, ENDPOINTS, REDELIVERIES, SECRETS)
PRIVATE_TABLES = (*CALLBACK_TABLES, "projection_status", LIMITS_TABLE)
LOCK_TIMEOUT_SECONDS = 10  # a statement of the role waits at most this long for a lock
IDLE_IN_TRANSACTION_SECONDS = 60  # a session that leaves a transaction open and idle longer is ended
# what the role may change, if anything, whatever its session's default_transaction_read_only (but the
# catalog's: pg_settings takes UPDATE, which is SET)
WRITES = """SELECT format('TEMPORARY ON DATABASE %%I', current_database())
WHERE has_database_privilege(%(role)s, current_database(), 'TEMPORARY')
UNION ALL SELECT format('CREATE ON DATABASE %%I', current_database())
WHERE has_database_privilege(%(role)s, current_database(), 'CREATE')
UNION ALL SELECT format('CREATE ON SCHEMA %%I', nspname) FROM pg_namespace
WHERE has_schema_privilege(%(role)s, oid, 'CREATE')
UNION ALL SELECT format('%%s ON %%s', p, c.oid::regclass)
FROM pg_class AS c, unnest(ARRAY['INSERT', 'UPDATE', 'DELETE', 'TRUNCATE']) AS p
WHERE c.relkind IN ('r', 'p', 'v', 'm', 'f') AND has_table_privilege(%(role)s, c.oid, p)
  AND c.relnamespace NOT IN ('pg_catalog'::regnamespace, 'information_schema'::regnamespace)
UNION ALL SELECT format('%%s ON SEQUENCE %%s', p, c.oid::regclass)
FROM pg_class AS c, unnest(ARRAY['UPDATE', 'USAGE']) AS p
WHERE c.relkind = 'S' AND has_sequence_privilege(%(role)s, c.oid, p)"""
# whether the service's role may see and signal the sessions of the role (`projections.analyst_watch`)
WATCHES = """SELECT rolsuper OR pg_has_role(%(service)s, %(role)s, 'USAGE')
    OR (pg_has_role(%(service)s, 'pg_signal_backend', 'USAGE')
        AND pg_has_role(%(service)s, 'pg_read_all_stats', 'USAGE'))
FROM pg_roles WHERE rolname = %(service)s"""


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
    idle_in_transaction_timeout: Annotated[
        int,
        Parameter(help="Seconds a session of the role may stay idle in a transaction before it is ended."),
    ] = IDLE_IN_TRANSACTION_SECONDS,
    partner: Annotated[
        str | None,
        Parameter(help="The partner whose rows alone the role sees; default: every partner's rows."),
    ] = None,
) -> int:
    """Create (or update) a LOGIN role that can read the schema `read` and nothing else: no advisory locks
    (the only role that may take one is the service's: this takes a superuser once, see docs/analytics.md),
    statements cancelled after --statement-timeout seconds, sessions idle in a transaction ended after
    --idle-in-transaction-timeout seconds (by the service, whatever the session sets), at most --connections
    connections; with --partner, it sees that partner's rows only (row-level security)."""
    if not ROLE_NAME.match(name):
        return fail(f"{name!r} is not a plain role name (lower-case letters, digits and _)")
    if min(statement_timeout, connections, idle_in_transaction_timeout) < 1:
        return fail("--statement-timeout, --idle-in-transaction-timeout and --connections must be at least 1")
    if partner is not None and not partner:
        return fail("--partner must name a partner")
    environment = Environment.read()
    url = database_url(environment)
    positions = open_read_schema(url)
    prepare(url, dimensions_of(environment))  # the dimensions, the analysts' views, the comments
    with psycopg.connect(url, autocommit=True) as conn:
        service = str(conn.execute("SELECT current_user").fetchone()[0])
        if service == name:
            return fail(f"{name!r} is the service's own role; choose another name")
        existed = conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (name,)).fetchone() is not None
        if password is None and not existed:
            password = secrets.token_urlsafe(18)
        limits = Limits(statement_timeout, connections, idle_in_transaction_timeout)
        try:
            with conn.transaction():
                for statement in grants(name, password, existed, conn.info.dbname, limits):
                    conn.execute(statement)
                for statement in partner_scope(conn, name, partner, positions):
                    conn.execute(statement)
                keep_locks_from(conn, name, service)
                keep_writes_from(conn, name, service)
                watch(conn, name, service, limits)
        except (LocksNotReserved, RoleRefused) as refusal:
            return fail(f"role {name} not {'updated' if existed else 'created'}: {refusal}")
    params = conninfo_to_dict(url)
    params.update(user=name, password=password)
    done = "updated" if existed else "created"
    rows = "every partner's rows" if partner is None else f"the rows of partner {partner!r} only"
    print(
        f"role {name} {done}: SELECT on every table and view of the schema {READ_SCHEMA} but the callback "
        f"tables and projection_status, {rows}, nothing else; no advisory locks, statements cancelled "
        f"after {statement_timeout} s, sessions idle in a transaction ended after "
        f"{idle_in_transaction_timeout} s, at most {connections} connections"
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
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(limits_table())
    return positions


@dataclass(frozen=True)
class Limits:
    """How long a statement of the role may run, how many connections it may hold, and how long a session
    may stay idle in a transaction."""

    statement_seconds: int
    connections: int
    idle_seconds: int = IDLE_IN_TRANSACTION_SECONDS

    def settings(self) -> dict[str, str]:
        """The role's session defaults: read-only, and no wait, statement or idle transaction without end."""
        return {
            "default_transaction_read_only": "on",
            "statement_timeout": f"{self.statement_seconds}s",
            "lock_timeout": f"{LOCK_TIMEOUT_SECONDS}s",
            "idle_in_transaction_session_timeout": f"{self.idle_seconds}s",
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


def keep_writes_from(conn: psycopg.Connection[Any], name: str, service: str) -> None:
    """`name` may change nothing in `conn`'s database, even in a session that turns read-only off: no table,
    view, sequence or schema, and no temporary tables, which PostgreSQL lets every role create by default
    (revoked from PUBLIC here, kept for the service's role)."""
    database = sql.Identifier(conn.info.dbname)
    for statement in (
        "REVOKE TEMPORARY ON DATABASE {} FROM PUBLIC",
        "REVOKE TEMPORARY ON DATABASE {} FROM {}",
    ):
        conn.execute(sql.SQL(statement).format(database, sql.Identifier(name)))
    conn.execute(sql.SQL("GRANT TEMPORARY ON DATABASE {} TO {}").format(database, sql.Identifier(service)))
    able = writes_of(conn, name)
    if able:
        raise RoleRefused(
            f"it could still change the database, even read-only by default ({', '.join(able)}), through a "
            f"grant of its own, of PUBLIC or of a role it belongs to; revoke that grant first"
        )


def writes_of(conn: psycopg.Connection[Any], role: str) -> list[str]:
    """What `role` may create or change in `conn`'s database (privileges, as `TRUNCATE ON read.x`)."""
    with conn.cursor(row_factory=tuple_row) as cursor:
        return [str(row[0]) for row in cursor.execute(WRITES, {"role": role}).fetchall()]


def watch(conn: psycopg.Connection[Any], name: str, service: str, limits: Limits) -> None:
    """Records `name` with its limits for the service's watch, and makes the service's role a member of it,
    so that the service may see its sessions and signal them (`projections.analyst_watch`)."""
    for statement in record_limits(name, limits.statement_seconds, limits.idle_seconds):
        conn.execute(statement)
    grant = sql.SQL("GRANT {} TO {}").format(sql.Identifier(name), sql.Identifier(service))
    with contextlib.suppress(psycopg.errors.InsufficientPrivilege), conn.transaction():
        conn.execute(grant)
    with conn.cursor(row_factory=tuple_row) as cursor:
        row = cursor.execute(WATCHES, {"service": service, "role": name}).fetchone()
    if not (row and row[0]):
        raise RoleRefused(
            f"the service's role {service} may not see nor signal the role's sessions, so it could not hold "
            f"them to their limits; ask a superuser to run {grant.as_string(conn)}, then run this again"
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


def dimensions_of(environment: Environment) -> Dimensions | None:
    """The dimension tables' rows from the service's settings; None (left as they are) when the settings
    cannot be read, each problem printed."""
    loaded = settings_or_none(environment.settings_file)
    return None if loaded is None else Dimensions.of(loaded.ledger)


@app.command(name="publication")
def publication(
    *,
    partner: Annotated[str, Parameter(help="The partner whose rows the publication carries.")],
    name: Annotated[str | None, Parameter(help="Name of the publication; default: ledger_<partner>.")] = None,
) -> int:
    """Create (or update) a logical replication publication of a partner's rows of the read tables, for a
    warehouse's CREATE SUBSCRIPTION (docs/analytics.md, "A change feed for the warehouse"): each table whose
    key holds the partner, with the row filter partner = P, and the dimension tables. Exit 2 for a partner
    the settings do not name or a name that is not a plain one."""
    environment = Environment.read()
    loaded = settings_or_none(environment.settings_file)
    if loaded is None:
        return fail("analyst publication: the settings cannot be read")
    if (unknown := unknown_partner(partner, loaded.ledger.partners)) is not None:
        return fail(f"analyst publication: {unknown}")
    name = name or f"ledger_{partner.lower()}"
    if not ROLE_NAME.match(name):
        return fail(
            f"analyst publication: {name!r} is not a plain name (lower-case letters, digits and _); "
            "give --name"
        )
    url = database_url(environment)
    open_read_schema(url)
    prepare(url, Dimensions.of(loaded.ledger))
    with psycopg.connect(url, autocommit=True) as conn:
        made = publish(conn, name, partner, PRIVATE_TABLES)
        level = wal_level(conn)
    print(
        f"publication {made.name} {'created' if made.created else 'updated'}: "
        f"the rows of partner {partner!r} "
        f"of {', '.join(READ_SCHEMA + '.' + t for t in made.filtered)}; whole: "
        f"{', '.join(READ_SCHEMA + '.' + t for t in made.whole)}"
    )
    if made.left_out:
        print(f"not published (their key does not hold the partner): {', '.join(made.left_out)}")
    if level != "logical":
        print(
            f"warning: wal_level is {level}: set wal_level = logical (and restart) before subscribing",
            file=sys.stderr,
        )
    params = conninfo_to_dict(url)
    print(
        f"subscribe with: CREATE SUBSCRIPTION {made.name} CONNECTION "
        f"'host={params.get('host', 'HOST')} port={params.get('port', '5432')} "
        f"dbname={params.get('dbname', '')} "
        f"user=REPLICATION_ROLE password=...' PUBLICATION {made.name};"
    )
    return 0
