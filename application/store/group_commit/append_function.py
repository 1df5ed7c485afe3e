"""The group committer's append: what a batch does under the events table's lock, as ONE statement.

The events table's EXCLUSIVE lock is the serial point of every save of the cluster (see
`application.store.group_commit`): a batch holds it from before its notification ids are drawn until its
COMMIT returns, so that ids become visible in commit order. Sent as separate statements (LOCK, NOTIFY,
INSERT, the write positions), each statement reached the server only when the committer's thread had sent it,
and between two of them the server waited for the client (`ClientRead`) with the lock held: in an API worker
whose request threads share one GIL, a wait of up to a switch interval each. Measured on 16 cores at 14 API
workers (bench/load.py, `bench/serial_point.py`): the lock held 95 % of the time, 1.1 ms per commit.

So the batch's transaction sends everything that does not need the lock first (the Idempotency-Key claims and
answers riding with it), then calls this function, which takes the lock, notifies, inserts the events and
raises the partners' write positions in one statement, and COMMIT follows at once: under the lock the server
waits for no more than the COMMIT message.

The function is created once per body (its name carries a digest of its text, so a changed body is a new
function and old processes keep theirs), under the schema lock, when a committer first needs it. Its
results: the notification ids of the events, in the order given, and the server's clock when the lock was
granted (for `broker_ledger_events_lock_held_seconds`).
"""

from __future__ import annotations

import hashlib
from typing import Any

from psycopg import Connection
from psycopg.rows import tuple_row
from psycopg.sql import SQL, Identifier, Literal

from application.store.schema_lock import schema_creation

BODY = """
CREATE FUNCTION {function}(
    ids uuid[], versions bigint[], topics text[], states bytea[], partners text[],
    OUT notification_ids bigint[], OUT lock_granted double precision)
LANGUAGE plpgsql AS $append$
#variable_conflict use_column
BEGIN
    LOCK TABLE {events} IN EXCLUSIVE MODE;
    lock_granted := extract(epoch FROM clock_timestamp());
    PERFORM pg_notify({channel}, '');
    WITH inserted AS (
        INSERT INTO {events} (originator_id, originator_version, topic, state)
        SELECT e.originator_id, e.originator_version, e.topic, e.state
        FROM unnest(ids, versions, topics, states) WITH ORDINALITY
            AS e (originator_id, originator_version, topic, state, ordinality)
        ORDER BY e.ordinality
        RETURNING notification_id
    )
    SELECT array_agg(inserted.notification_id ORDER BY inserted.notification_id) INTO notification_ids
    FROM inserted;{positions}
END
$append$
"""
# Each partner's position: the batch's last event (under the lock the batch is the last thing written, so this
# is no lower than the partner's own events, and all of them are visible at one commit).
POSITIONS = """
    INSERT INTO {positions} AS t (partner, position)
    SELECT w.partner, notification_ids[cardinality(notification_ids)] FROM unnest(partners) AS w (partner)
    ON CONFLICT (partner) DO UPDATE SET position = greatest(t.position, excluded.position);"""


class AppendFunction:
    """The append function of one events table (and write positions' table, if kept), created when first
    needed (`ensure`), and the statement that calls it (`call`)."""

    def __init__(
        self, schema: str, events_table: str, channel: str, positions: tuple[str, str] | None = None
    ) -> None:
        events = Identifier(schema, events_table)
        kept = SQL(POSITIONS).format(positions=Identifier(*positions)) if positions else SQL("")
        body = SQL(BODY).format(
            function=SQL("{function}"), events=events, channel=Literal(channel), positions=kept
        )
        text = body.as_string()
        digest = hashlib.sha256(text.encode()).hexdigest()[:12]
        self.name = Identifier(schema, f"{events_table}_append_{digest}")
        self.create = text.replace("{function}", self.name.as_string())
        self.call = (
            SQL("SELECT notification_ids, lock_granted FROM {0}(%b, %b, %b, %b, %b)")
            .format(self.name)
            .as_string()
        )
        self.signature = f"{self.name.as_string()}(uuid[], bigint[], text[], bytea[], text[])"
        self.ready = False

    def ensure(self, conn: Connection[Any]) -> None:
        """Creates the function unless it exists (on `conn`, in autocommit mode, outside a transaction)."""
        if self.ready:
            return
        if not self._exists(conn):
            with schema_creation(conn):
                if not self._exists(conn):
                    with conn.transaction():
                        conn.execute(self.create)
                        conn.execute(SQL("REVOKE ALL ON FUNCTION {0} FROM PUBLIC").format(self.name))
        self.ready = True

    def _exists(self, conn: Connection[Any]) -> bool:
        with conn.cursor(row_factory=tuple_row) as cursor:
            row = cursor.execute("SELECT to_regprocedure(%s) IS NOT NULL", (self.signature,)).fetchone()
        return bool(row and row[0])
