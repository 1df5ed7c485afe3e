"""The events feed's index (`read.events_feed`): every event of a transaction or a customer, keyed by its
position in the log, with the partner it belongs to; and the feed's reads of it.

`GET /events` (`interface/events/`) reads a partner's rows after a cursor from here, and the transaction or
customer each row names from the log itself, replayed up to the row's version, showing the rows whose event
changed its subject's status. So this index knows no status and no event by name: which event changes a
status is the aggregate's own knowledge (its handlers set it), and an event added to the domain (a new status
of a sell) reaches the feed with no change here or there.

The rules a cursor relies on:

- **Keyed by the log.** A row's key is its event's notification id, the same however often the index is
  rebuilt (`projections rebuild` empties it and replays the log: the same rows come back, in the same order),
  so a cursor, a position in the log, stays valid for good.
- **No gap is ever passed.** The index writes a page's rows with its own position in one transaction, in the
  log's order; and the log makes ids visible in the order they were issued (every save takes the events
  table's EXCLUSIVE lock from before its ids are issued until it commits: `application/store/group_commit/`).
  So whatever the index shows, it shows with every earlier event of the log applied, and a cursor is only
  ever a position the index has shown: an id that a slower transaction could still fill in lies beyond
  every row it has shown. A gap that stays (a sequence value a rolled-back save took) is only passed over.

The partner is in the event that creates a subject (a transaction's `order`, a customer's `partner`); a later
event's row takes it from its subject's first row (`events_feed_by_subject`), or from the page's own memory
when both are in one page. A row whose partner cannot be found stops the projection (NOT NULL), as a
projection stops on any event it cannot apply, rather than leaving a partner's event out of its feed.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any
from uuid import UUID

import psycopg
from eventsourcing.dispatch import singledispatchmethod
from eventsourcing.domain import AggregateCreated
from eventsourcing.persistence import Tracking
from eventsourcing.projection import Projection
from psycopg.rows import tuple_row
from psycopg.sql import SQL, Composed, Identifier

from domain.customer import Customer
from domain.transaction import Transaction
from projections.base.json_rows import json_rows
from projections.base.postgres import READ_SCHEMA, ReadModel
from projections.base.runner import APPLICATION, ProjectionSpec
from projections.partner_policies import mapping_statements, partner_rows

TABLE = "events_feed"
TRACKING_TABLE = "eventsfeed_tracking"  # the view's tracking table: the projection's name + "_tracking"
TRANSACTION = "transaction"
CUSTOMER = "customer"
SUBJECTS = (TRANSACTION, CUSTOMER)

CREATE = """CREATE TABLE IF NOT EXISTS {events_feed} (
    notification_id bigint PRIMARY KEY,
    partner text NOT NULL,
    subject text NOT NULL,
    subject_id uuid NOT NULL,
    version integer NOT NULL,
    event_type text NOT NULL)"""
INDEXES = (  # (name, columns)
    ("events_feed_by_partner", "partner, notification_id"),
    ("events_feed_by_subject", "subject_id, version"),
)
# a page's rows; a row without its partner takes its subject's (from its first row, written before)
INSERT = (
    "INSERT INTO {events_feed} (notification_id, partner, subject, subject_id, version, event_type) "
    "SELECT r.notification_id, coalesce(r.partner, ("
    "SELECT f.partner FROM {events_feed} AS f WHERE f.subject_id = r.subject_id ORDER BY f.version LIMIT 1"
    ")), r.subject, r.subject_id, r.version, r.event_type FROM ("
    + json_rows("bigint, text, text, uuid, integer, text")
    + ") AS r (notification_id, partner, subject, subject_id, version, event_type) ON CONFLICT DO NOTHING"
)


class EventsFeed(ReadModel):
    """The index's table, its writes (each on the cursor of one `recording`) and its position."""

    tables = (TABLE,)

    def create_statements(self) -> list[Composed]:
        names = {"events_feed": self.table(TABLE)}
        statements = mapping_statements(self.table)
        statements.append(SQL(CREATE).format(**names))
        statements += [
            SQL("CREATE INDEX IF NOT EXISTS {} ON {} (" + columns + ")").format(
                Identifier(name), names[TABLE]
            )
            for name, columns in INDEXES
        ]
        statements.append(partner_rows(self.table, TABLE))
        return statements

    def index(self, subject: str, event: Any, tracking: Tracking) -> None:
        """The event's row: its position, partner (if its event names it), subject, version and type."""
        partner = partner_of(event)
        with self.recording(tracking) as curs:
            kept = self.kept()
            if kept is not None:  # a later event of the page takes its subject's partner from memory
                partners = kept.setdefault("partners", {})
                if partner is None:
                    partner = partners.get(event.originator_id)
                else:
                    partners[event.originator_id] = partner
            row = (
                tracking.notification_id,
                partner,
                subject,
                event.originator_id,
                event.originator_version,
                type(event).__name__,
            )
            insert = self.statement(("index",), lambda: SQL(INSERT).format(events_feed=self.table(TABLE)))
            self.append_row(curs, TABLE, insert, row)


def partner_of(event: Any) -> str | None:
    """The partner an event that creates its subject names (a transaction's order's, a customer's own);
    None for every later event."""
    if not isinstance(event, AggregateCreated):
        return None
    order = getattr(event, "order", None)
    return order.partner if order is not None else event.partner


class EventsFeedProjection(Projection[EventsFeed]):
    """Every event of a transaction or a customer is a row; every other event only moves the position."""

    name = "EventsFeed"

    @singledispatchmethod
    def process_event(self, domain_event: Any, tracking: Tracking) -> None:
        self.view.skip(tracking)

    @process_event.register
    def _transaction_event(self, domain_event: Transaction.Event, tracking: Tracking) -> None:
        self.view.index(TRANSACTION, domain_event, tracking)

    @process_event.register
    def _customer_event(self, domain_event: Customer.Event, tracking: Tracking) -> None:
        self.view.index(CUSTOMER, domain_event, tracking)


EVENTS_FEED = ProjectionSpec(EventsFeedProjection, EventsFeed)


# --- the feed's reads -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FeedRow:
    """One row of a partner's index: the event's position in the log, its subject and the version of it."""

    position: int
    subject: str
    subject_id: UUID
    version: int


def feed_position(conn: psycopg.Connection[Any], schema: str = READ_SCHEMA) -> int:
    """The position of the last event the index has applied (0 before the first, or before its tables
    exist): every row up to it is visible to any statement that runs after this one."""
    try:
        with conn.transaction(), conn.cursor(row_factory=tuple_row) as cursor:
            select = SQL("SELECT notification_id FROM {} WHERE application_name = %s").format(
                Identifier(schema, TRACKING_TABLE)
            )
            row = cursor.execute(select, (APPLICATION,)).fetchone()
    except psycopg.errors.UndefinedTable:
        return 0
    return int(row[0]) if row else 0


def feed_rows(
    conn: psycopg.Connection[Any],
    partner: str,
    after: int,
    subjects: Iterable[str],
    limit: int,
    schema: str = READ_SCHEMA,
) -> list[FeedRow]:
    """At most `limit` of the partner's rows after position `after`, of `subjects` only, in log order."""
    select = SQL(
        "SELECT notification_id, subject, subject_id, version FROM {} WHERE partner = %s "
        "AND notification_id > %s AND subject = ANY(%s) ORDER BY notification_id LIMIT %s"
    ).format(Identifier(schema, TABLE))
    try:
        with conn.transaction(), conn.cursor(row_factory=tuple_row) as cursor:
            rows = cursor.execute(select, (partner, after, list(subjects), limit)).fetchall()
    except psycopg.errors.UndefinedTable:
        return []
    return [
        FeedRow(int(position), subject, subject_id, version)
        for position, subject, subject_id, version in rows
    ]


def news_since(
    conn: psycopg.Connection[Any], since: int | None, schema: str = READ_SCHEMA
) -> tuple[int, frozenset[str]]:
    """The index's position now and the partners with a row after `since` up to it, read in one snapshot
    (with `since` None, the position alone): what the feed's waker asks, while requests wait."""
    tracking, table = Identifier(schema, TRACKING_TABLE), Identifier(schema, TABLE)
    select = SQL(
        "SELECT t.notification_id, CASE WHEN %(since)s::bigint IS NULL THEN '{{}}'::text[] ELSE ARRAY("
        "SELECT DISTINCT f.partner FROM {table} AS f WHERE f.notification_id > %(since)s::bigint "
        "AND f.notification_id <= t.notification_id) END "
        "FROM {tracking} AS t WHERE t.application_name = %(app)s"
    ).format(table=table, tracking=tracking)
    try:  # one statement, one snapshot: on an autocommit connection, no BEGIN and COMMIT around it
        with conn.cursor(row_factory=tuple_row) as cursor:
            row = cursor.execute(select, {"since": since, "app": APPLICATION}, prepare=True).fetchone()
    except psycopg.errors.UndefinedTable:
        return 0, frozenset()
    if row is None:
        return 0, frozenset()
    return int(row[0]), frozenset(row[1])
