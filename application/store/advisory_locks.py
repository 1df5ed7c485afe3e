"""The service's advisory locks are its own: no other role of the database may take an advisory lock.

The service serialises its start on advisory locks (`schema_lock.SCHEMA_LOCK`, the projections' start lock,
the locks under which tables are created) and leads each projection by one (`ProjectionSpec.lock_key`).
PostgreSQL lets every role that may connect take any advisory lock, whatever its other privileges: a
read-only analyst who took one of those keys would keep a new `serve`, a replica or `projections status`
waiting until its lock timeout, or keep a projection from running anywhere.

The functions that take an advisory lock are therefore revoked from PUBLIC in the service's database and
granted to the service's own role (`reserve_for`); the functions that release one are left alone (a session
can only release its own locks). Functions are objects of one database, so is the revocation; and advisory
locks are keyed per database too, so a lock taken in another database never meets the service's.

The functions belong to the bootstrap superuser, so only a superuser can revoke them. A service that runs as
another role cannot do it itself: `reserve_for` then raises `LocksNotReserved` with the statements a
superuser must run once (`reservation_sql`). Superusers bypass privileges and can always take the locks.
"""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg import sql
from psycopg.rows import tuple_row

_TAKING = (
    "pg_advisory_lock",
    "pg_advisory_lock_shared",
    "pg_try_advisory_lock",
    "pg_try_advisory_lock_shared",
    "pg_advisory_xact_lock",
    "pg_advisory_xact_lock_shared",
    "pg_try_advisory_xact_lock",
    "pg_try_advisory_xact_lock_shared",
)
_KEYS = ("bigint", "integer, integer")  # a key as one bigint, or as two integers
# every function that takes an advisory lock, with its argument types
LOCK_FUNCTIONS = tuple(f"pg_catalog.{name}({args})" for name in _TAKING for args in _KEYS)
_FUNCTIONS = sql.SQL(", ".join(LOCK_FUNCTIONS))  # constants of this module, not input


class LocksNotReserved(Exception):
    """Other roles may still take advisory locks in the database, and this role cannot stop them."""


def reservation_sql(service_role: str) -> list[sql.Composed]:
    """The statements that keep every role but `service_role` (and superusers) from taking advisory locks."""
    return [
        sql.SQL("REVOKE EXECUTE ON FUNCTION {} FROM PUBLIC").format(_FUNCTIONS),
        sql.SQL("GRANT EXECUTE ON FUNCTION {} TO {}").format(_FUNCTIONS, sql.Identifier(service_role)),
    ]


def reserve_for(conn: psycopg.Connection[Any], service_role: str) -> None:
    """Makes sure that in `conn`'s database only `service_role` (and superusers) may take advisory locks:
    does it when `conn`'s role is a superuser, else checks that a superuser did (`LocksNotReserved`)."""
    if _is_superuser(conn):
        for statement in reservation_sql(service_role):
            conn.execute(statement)
        return
    database = conn.info.dbname
    if lock_functions_of(conn, "public"):
        problem = f"every role that may connect to database {database} may take advisory locks"
        raise LocksNotReserved(_ask_a_superuser(conn, service_role, problem))
    if len(lock_functions_of(conn, service_role)) < len(LOCK_FUNCTIONS):
        problem = f"the service's role {service_role} may not take advisory locks in database {database}"
        raise LocksNotReserved(_ask_a_superuser(conn, service_role, problem))


def lock_functions_of(conn: psycopg.Connection[Any], role: str) -> list[str]:
    """The functions of `LOCK_FUNCTIONS` that `role` ("public" for PUBLIC) may execute in `conn`'s database,
    through its own grants, PUBLIC's or those of a role it belongs to."""
    with conn.cursor(row_factory=tuple_row) as cursor:
        rows = cursor.execute(
            "SELECT f FROM unnest(%s::text[]) AS f WHERE has_function_privilege(%s, f, 'EXECUTE')",
            (list(LOCK_FUNCTIONS), role),
        ).fetchall()
    return [row[0] for row in rows]


def _is_superuser(conn: psycopg.Connection[Any]) -> bool:
    with conn.cursor(row_factory=tuple_row) as cursor:
        row = cursor.execute("SELECT rolsuper FROM pg_roles WHERE rolname = current_user").fetchone()
    return bool(row and row[0])


def _ask_a_superuser(conn: psycopg.Connection[Any], service_role: str, problem: str) -> str:
    statements = ";\n  ".join(statement.as_string(conn) for statement in reservation_sql(service_role))
    return (
        f"{problem}, and only a superuser can change that (the lock functions belong to PostgreSQL's "
        f"bootstrap superuser). Ask one to run, in database {conn.info.dbname}:\n  {statements};\n"
        "then run this command again."
    )
