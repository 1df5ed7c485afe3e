"""A database of a test's own on the suite's server: created empty, dropped with its connections at the
end."""

from __future__ import annotations

import itertools
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager, suppress

import psycopg
from psycopg import sql

from application.store.database import with_database


@contextmanager
def scratch_database(server_url: str, prefix: str, template: str | None = None) -> Iterator[str]:
    """The URL of a new database named `<prefix>_<random>`; a copy of the database named `template` when
    given (waiting up to 5 s for the template's last connections to be gone)."""
    name = f"{prefix}_{uuid.uuid4().hex[:12]}"
    create = sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name))
    if template is not None:
        create = sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(
            sql.Identifier(name), sql.Identifier(template)
        )
    _create(server_url, create)
    try:
        yield with_database(server_url, name)
    finally:
        with psycopg.connect(server_url, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


def _create(server_url: str, create: sql.Composable) -> None:
    for attempt in itertools.count():
        try:
            with psycopg.connect(server_url, autocommit=True) as conn:
                conn.execute(create)
            return
        except psycopg.errors.ObjectInUse:
            if attempt >= 50:
                raise
            time.sleep(0.1)


def kept_position(database_url: str, partner: str) -> int | None:
    """The read-your-writes position the store keeps for `partner` (None when it has written nothing)."""
    with psycopg.connect(database_url) as conn:
        row = conn.execute(
            "SELECT position FROM api.write_positions WHERE partner = %s", [partner]
        ).fetchone()
    return None if row is None else row[0]


@contextmanager
def table_locked(url: str, table: sql.Composable, mode: str, seconds: int) -> Iterator[None]:
    """Another client's transaction holding `table` in lock `mode` (EXCLUSIVE, ACCESS EXCLUSIVE) while inside,
    at most `seconds`: then the server ends it, so that a request that does wait fails its test rather than
    hang it."""
    options = f"-c idle_in_transaction_session_timeout={seconds * 1000}"
    with psycopg.connect(url, options=options) as holder:
        holder.execute(sql.SQL("LOCK TABLE {} IN " + mode + " MODE").format(table))
        yield
        with suppress(psycopg.Error):
            holder.rollback()
