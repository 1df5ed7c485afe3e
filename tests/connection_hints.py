"""What a test says when PostgreSQL has no connection left ("sorry, too many clients already"): the suite's
budget and who holds the server's connections, rather than advice to start a server that is running."""

from __future__ import annotations

import psycopg

from application.store.database import redact

SUITE_CONNECTIONS = 40  # the most this suite holds at once (measured by conftest's ConnectionSampler)
TOO_MANY = "too many clients"
WHO_IS_CONNECTED = """
SELECT coalesce(nullif(application_name, ''), '(unnamed)'), coalesce(usename, '-'), coalesce(datname, '-'),
       count(*)
FROM pg_stat_activity WHERE backend_type = 'client backend'
GROUP BY 1, 2, 3 ORDER BY 4 DESC
"""


def too_many_clients(server_url: str) -> str:
    """What to say when the server has no connection left: the suite's budget, and who holds them (asked on
    one of the superuser's reserved connections, if there is one)."""
    advice = (
        f"PostgreSQL at {redact(server_url)} is running but has no connection left. This suite needs at most "
        f"{SUITE_CONNECTIONS} at once (a `serve` it starts holds at most BROKER_LEDGER_DB_CONNECTIONS = 8 "
        "per worker and 1 per projection; see README, Configuration: Connections); the rest of"
        " max_connections is taken by other clients. Stop them, run fewer test sessions at once, or raise it."
    )
    try:
        with psycopg.connect(server_url, autocommit=True, connect_timeout=5) as connection:
            limit = connection.execute("SELECT current_setting('max_connections')").fetchone()[0]
            rows = connection.execute(WHO_IS_CONNECTED).fetchall()
    except psycopg.OperationalError:
        return advice + "\n(Who holds them cannot be asked: no connection is left for that either.)"
    used = sum(count for *_, count in rows)
    holders = "\n".join(f"  {count:4} {user} on {db}: {name}" for name, user, db, count in rows[:10])
    return f"{advice}\nIn use: {used} of max_connections {limit}, by (application_name):\n{holders}"


def hint_for(text: str, server_url: str) -> str:
    """`too_many_clients`' advice, after an empty line, when `text` (an error, a server's log) says the server
    had no connection left; else nothing."""
    return f"\n\n{too_many_clients(server_url)}" if TOO_MANY in text else ""
