"""The outbox in PostgreSQL: its tables, and every query of them.

Six tables, in the read schema: `callback_transactions` (each transaction's state as the outbox projection
last saw it), `callback_outbox` (one delivery per status change of a transaction with a callback URL),
`callback_attempts` (every attempt at one), `callback_endpoints` (URLs that answered 410 Gone),
`callback_redeliveries` (the Idempotency-Keys of redeliveries asked through the API) and `callback_secrets`
(the partners' secret rotations, see `secrets`). The projection (`projection`) keeps the states and inserts
each delivery (`ENQUEUE`); the delivery worker (`delivery`, through `DeliveryStore`) owns the delivery
columns (`status`, `attempts`, `next_attempt_at`, lease) and the tables of attempts and stopped endpoints;
the API's management of callbacks (`interface.callbacks`) lists deliveries across a partner's transactions
and redelivers one (`DeliveryStore.page`, `DeliveryStore.redeliver`).

A redelivery (`POST /callbacks/{id}/redeliver`) makes a delivery pending again, due now, with a new retry
window, whatever its status was (delivered, failed, stopped, or pending in its backoff); the delivery worker
then sends it as it sends any, with the same id (`webhook-id`) and the same body: the transaction as it
stood right after that status change. It never changes the other deliveries: a newer delivery of the same
transaction that was delivered is not sent again, so a redelivered old one may reach the receiver after
newer ones (receivers order by `created`, or by the transaction's `updated`, and deduplicate by the id); one
still pending waits behind it, as the deliveries of a transaction always go out in order. A redelivery to a
URL that answered 410 Gone opens that URL again for the partner's deliveries to come (asking for a
redelivery says the receiver is back), but does not redeliver the others it stopped. A delivery whose
attempt is in flight at that moment is not sent twice: that attempt's outcome settles it.

Several processes may deliver at once: a delivery is claimed with a lease (`FOR UPDATE SKIP LOCKED`, so two
workers never claim the same one), and only while every earlier delivery of its transaction is finished, so
the deliveries of a transaction go out one after the other, in order. A worker that dies holding a lease
loses nothing: once the lease has run out another worker claims the delivery again.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from psycopg.rows import dict_row
from psycopg.sql import SQL, Identifier
from psycopg_pool import ConnectionPool

from projections.base.json_rows import json_rows
from projections.callbacks import secrets as signing
from projections.callbacks.secrets import NO_ROTATION, SECRETS, SigningSalts
from projections.callbacks.snapshots import StoredState

STATES = "callback_transactions"
OUTBOX = "callback_outbox"
ATTEMPTS = "callback_attempts"
ENDPOINTS = "callback_endpoints"
REDELIVERIES = "callback_redeliveries"

PENDING = "pending"
DELIVERED = "delivered"  # a 2xx answer
FAILED = "failed"  # an attempt that did not succeed; as a delivery's status: given up after the retry window
STOPPED = "stopped"  # the endpoint answered 410 Gone: nothing more is sent to it

# The statements name the tables {states}, {outbox}, {attempts}, {endpoints}, {redeliveries} and {secrets}
# (see `tables`).
CREATE = (
    """CREATE TABLE IF NOT EXISTS {states} (
    transaction_id uuid PRIMARY KEY,
    partner text NOT NULL,
    transaction_code text NOT NULL,
    version integer NOT NULL,
    topic text NOT NULL,
    state bytea NOT NULL,
    status text NOT NULL,
    sequence integer NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS {outbox} (
    event_id text PRIMARY KEY,
    partner text NOT NULL,
    transaction_id uuid NOT NULL,
    transaction_code text NOT NULL,
    sequence integer NOT NULL,
    transaction_status text NOT NULL,
    url text NOT NULL,
    topic text NOT NULL,
    version integer NOT NULL,
    state bytea NOT NULL,
    created timestamptz NOT NULL,
    notification_id bigint NOT NULL,
    status text NOT NULL DEFAULT 'pending',
    attempts integer NOT NULL DEFAULT 0,
    next_attempt_at timestamptz NOT NULL DEFAULT now(),
    first_attempt_at timestamptz,
    finished_at timestamptz,
    response_code integer,
    lease_token uuid,
    leased_until timestamptz,
    UNIQUE (transaction_id, sequence))""",
    "CREATE INDEX IF NOT EXISTS callback_outbox_due ON {outbox} (next_attempt_at) WHERE status = 'pending'",
    "CREATE INDEX IF NOT EXISTS callback_outbox_code ON {outbox} (partner, transaction_code, sequence)",
    "CREATE INDEX IF NOT EXISTS callback_outbox_url ON {outbox} (partner, url) WHERE status = 'pending'",
    "CREATE INDEX IF NOT EXISTS callback_outbox_partner ON {outbox} (partner, created)",
    """CREATE TABLE IF NOT EXISTS {attempts} (
    id bigserial PRIMARY KEY,
    event_id text NOT NULL,
    number integer NOT NULL,
    at timestamptz NOT NULL DEFAULT now(),
    duration_ms integer NOT NULL,
    outcome text NOT NULL,
    response_code integer,
    error text,
    address text)""",
    "CREATE INDEX IF NOT EXISTS callback_attempts_event ON {attempts} (event_id, id)",
    """CREATE TABLE IF NOT EXISTS {endpoints} (
    partner text NOT NULL,
    url text NOT NULL,
    stopped_at timestamptz NOT NULL DEFAULT now(),
    event_id text NOT NULL,
    response_code integer NOT NULL,
    PRIMARY KEY (partner, url))""",
    """CREATE TABLE IF NOT EXISTS {redeliveries} (
    partner text NOT NULL,
    idempotency_key text NOT NULL,
    event_id text NOT NULL,
    at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (partner, idempotency_key))""",
    "CREATE INDEX IF NOT EXISTS callback_redeliveries_at ON {redeliveries} (at)",
    signing.CREATE,
)
# New deliveries, written by the projection with its tracking position (the rows as JSON, see
# `projections.base.json_rows`; a rebuild's again is left as it is)
ENQUEUE = (
    """INSERT INTO {outbox} (event_id, partner, transaction_id, transaction_code, sequence,
    transaction_status, url, topic, version, state, created, notification_id) """
    + json_rows("text, text, uuid, text, integer, text, text, text, integer, bytea, timestamptz, bigint")
    + " ON CONFLICT DO NOTHING"
)

CLAIM = (
    """UPDATE {outbox} AS o SET lease_token = %(token)s,
    leased_until = now() + make_interval(secs => %(lease)s),
    first_attempt_at = coalesce(o.first_attempt_at, now())
WHERE o.event_id = (
    SELECT c.event_id FROM {outbox} AS c
    WHERE c.status = 'pending' AND c.next_attempt_at <= now()
    AND (c.leased_until IS NULL OR c.leased_until < now())
    AND NOT EXISTS (SELECT 1 FROM {outbox} AS e
        WHERE e.transaction_id = c.transaction_id AND e.sequence < c.sequence AND e.status = 'pending')
    ORDER BY c.next_attempt_at, c.notification_id LIMIT 1 FOR UPDATE SKIP LOCKED)
RETURNING o.event_id, o.partner, o.transaction_id, o.transaction_code, o.sequence, o.url, o.created, o.topic,
    o.version, o.state, o.attempts, EXISTS (SELECT 1 FROM {endpoints} AS s
        WHERE s.partner = o.partner AND s.url = o.url) AS endpoint_stopped,
    """
    + f"{signing.CURRENT_SALT} AS current_salt, {signing.PREVIOUS_SALT} AS previous_salt"
)
ADD_ATTEMPT = """INSERT INTO {attempts}
    (event_id, number, duration_ms, outcome, response_code, error, address)
VALUES (%(event_id)s, %(number)s, %(duration_ms)s, %(outcome)s, %(response_code)s, %(error)s, %(address)s)"""
FINISH = """UPDATE {outbox} SET status = %(status)s, attempts = attempts + %(sent)s, finished_at = now(),
    response_code = coalesce(%(response_code)s, response_code), lease_token = NULL, leased_until = NULL
WHERE event_id = %(event_id)s AND lease_token = %(token)s"""
RETRY = """UPDATE {outbox} SET attempts = attempts + 1, response_code = %(response_code)s,
    lease_token = NULL, leased_until = NULL, next_attempt_at = now() + make_interval(secs => %(delay)s),
    status = CASE WHEN first_attempt_at + make_interval(secs => %(window)s)
        < now() + make_interval(secs => %(delay)s) THEN 'failed' ELSE 'pending' END,
    finished_at = CASE WHEN first_attempt_at + make_interval(secs => %(window)s)
        < now() + make_interval(secs => %(delay)s) THEN now() END
WHERE event_id = %(event_id)s AND lease_token = %(token)s"""
STOP_ENDPOINT = """WITH stop AS (INSERT INTO {endpoints} (partner, url, event_id, response_code)
    VALUES (%(partner)s, %(url)s, %(event_id)s, %(response_code)s) ON CONFLICT DO NOTHING)
UPDATE {outbox} SET status = 'stopped', finished_at = now(), lease_token = NULL, leased_until = NULL
WHERE partner = %(partner)s AND url = %(url)s AND status = 'pending' AND event_id <> %(event_id)s"""
COLUMNS = """event_id, transaction_code, sequence, transaction_status, url, status, created, next_attempt_at,
    finished_at, response_code"""
LIST = (
    "SELECT "
    + COLUMNS
    + """ FROM {outbox} WHERE partner = %s AND transaction_code = %s
ORDER BY sequence"""
)
# a partner's deliveries across its transactions, newest first, narrowed by status and creation time
WHERE_OF_PARTNER = """WHERE partner = %(partner)s AND (%(status)s::text IS NULL OR status = %(status)s)
    AND (%(from)s::timestamptz IS NULL OR created >= %(from)s)
    AND (%(to)s::timestamptz IS NULL OR created < %(to)s)"""
PAGE = (
    "SELECT "
    + COLUMNS
    + " FROM {outbox} "
    + WHERE_OF_PARTNER
    + " ORDER BY created DESC, event_id LIMIT %(limit)s OFFSET %(offset)s"
)
COUNT = "SELECT count(*) AS total FROM {outbox} " + WHERE_OF_PARTNER
ONE = "SELECT " + COLUMNS + " FROM {outbox} WHERE partner = %(partner)s AND event_id = %(event_id)s"
# a redelivery (see the module's docstring): its key taken first, when it has one (a key taken before: the
# redelivery was made, and is not made again)
TAKE_KEY = """INSERT INTO {redeliveries} (partner, idempotency_key, event_id)
VALUES (%(partner)s, %(key)s, %(event_id)s) ON CONFLICT DO NOTHING RETURNING event_id"""
FORGET_KEYS = "DELETE FROM {redeliveries} WHERE at < now() - interval '2 days'"  # past any key's 24 h
REDELIVER = """WITH delivery AS (UPDATE {outbox} SET status = 'pending', next_attempt_at = now(),
    first_attempt_at = NULL, finished_at = NULL
    WHERE partner = %(partner)s AND event_id = %(event_id)s RETURNING partner, url)
DELETE FROM {endpoints} AS s USING delivery AS d WHERE s.partner = d.partner AND s.url = d.url"""
LIST_ATTEMPTS = """SELECT event_id, number, at, duration_ms, outcome, response_code, error FROM {attempts}
WHERE event_id = ANY(%s) ORDER BY id"""


def tables(schema: str) -> dict[str, Identifier]:
    """The tables in `schema`, by the names the statements use."""
    names = {
        "states": STATES,
        "outbox": OUTBOX,
        "attempts": ATTEMPTS,
        "endpoints": ENDPOINTS,
        "redeliveries": REDELIVERIES,
        "secrets": SECRETS,
    }
    return {key: Identifier(schema, name) for key, name in names.items()}


@dataclass(frozen=True)
class Delivery:
    """A claimed delivery: what to send where, the partner's secret rotations it is signed by, and the lease
    that lets this worker record its outcome."""

    event_id: str
    partner: str
    transaction_code: str
    sequence: int
    url: str
    created: datetime
    state: StoredState
    attempts: int  # made before this one
    lease_token: uuid.UUID
    endpoint_stopped: bool
    salts: SigningSalts = NO_ROTATION


@dataclass(frozen=True)
class Attempt:
    outcome: str  # DELIVERED, FAILED or STOPPED
    duration_ms: int
    response_code: int | None = None
    error: str | None = None
    address: str | None = None  # the IP address connected to


@dataclass(frozen=True)
class AttemptRecord:
    number: int
    at: datetime
    duration_ms: int
    outcome: str
    response_code: int | None
    error: str | None


@dataclass(frozen=True)
class DeliveryRecord:
    event_id: str
    transaction_code: str
    sequence: int
    transaction_status: str
    url: str
    status: str
    created: datetime
    next_attempt_at: datetime | None
    finished_at: datetime | None
    response_code: int | None
    attempts: list[AttemptRecord] = field(default_factory=list)


@dataclass(frozen=True)
class DeliveryFilter:
    """Which of a partner's deliveries a page shows: by status, and by creation time (from inclusive, to
    exclusive)."""

    status: str | None = None
    created_from: datetime | None = None
    created_to: datetime | None = None


class DeliveryStore:
    def __init__(self, pool: ConnectionPool, schema: str) -> None:
        self.pool = pool
        self.names = tables(schema)

    def _sql(self, statement: str) -> Any:
        return SQL(statement).format(**self.names)  # type: ignore[arg-type]

    def claim(self, lease_seconds: float) -> Delivery | None:
        """The next due delivery whose earlier deliveries are all finished, leased to the caller."""
        token = uuid.uuid4()
        with self.pool.connection() as conn, conn.cursor(row_factory=dict_row) as curs:
            row = curs.execute(self._sql(CLAIM), {"token": token, "lease": lease_seconds}).fetchone()
        if row is None:
            return None
        return Delivery(
            event_id=row["event_id"],
            partner=row["partner"],
            transaction_code=row["transaction_code"],
            sequence=row["sequence"],
            url=row["url"],
            created=row["created"],
            state=StoredState(row["transaction_id"], row["version"], row["topic"], bytes(row["state"])),
            attempts=row["attempts"],
            lease_token=token,
            endpoint_stopped=row["endpoint_stopped"],
            salts=SigningSalts(row["current_salt"], row["previous_salt"]),
        )

    def finish(self, delivery: Delivery, attempt: Attempt | None, status: str) -> None:
        """Records the attempt (none: nothing was sent) and closes the delivery as DELIVERED or STOPPED."""
        with self.pool.connection() as conn:
            if attempt is not None:
                conn.execute(self._sql(ADD_ATTEMPT), self._attempt(delivery, attempt))
            conn.execute(
                self._sql(FINISH),
                {
                    "status": status,
                    "sent": 0 if attempt is None else 1,
                    "response_code": attempt.response_code if attempt else None,
                    "event_id": delivery.event_id,
                    "token": delivery.lease_token,
                },
            )

    def retry(self, delivery: Delivery, attempt: Attempt, delay: float, window: float) -> None:
        """Records a failed attempt; the delivery is due again after `delay` seconds, or given up (FAILED)
        when that is past `window` seconds after its first attempt."""
        with self.pool.connection() as conn:
            conn.execute(self._sql(ADD_ATTEMPT), self._attempt(delivery, attempt))
            conn.execute(
                self._sql(RETRY),
                {
                    "response_code": attempt.response_code,
                    "delay": delay,
                    "window": window,
                    "event_id": delivery.event_id,
                    "token": delivery.lease_token,
                },
            )

    def stop_endpoint(self, delivery: Delivery, attempt: Attempt) -> None:
        """The endpoint answered 410: this delivery and every pending one to the same URL are STOPPED."""
        with self.pool.connection() as conn:
            conn.execute(
                self._sql(STOP_ENDPOINT),
                {
                    "partner": delivery.partner,
                    "url": delivery.url,
                    "event_id": delivery.event_id,
                    "response_code": attempt.response_code,
                },
            )
        self.finish(delivery, attempt, STOPPED)

    def deliveries(self, partner: str, transaction_code: str) -> list[DeliveryRecord]:
        """Every delivery of a transaction, in order, each with its attempts."""
        with self.pool.connection() as conn, conn.cursor(row_factory=dict_row) as curs:
            rows = curs.execute(self._sql(LIST), (partner, transaction_code)).fetchall()
            return self._records(curs, rows)

    def page(
        self, partner: str, where: DeliveryFilter, page: int, page_size: int
    ) -> tuple[int, list[DeliveryRecord]]:
        """The total of the partner's deliveries that `where` keeps, and page `page` of them (from 1),
        newest first, each with its attempts; in one snapshot."""
        params = {
            "partner": partner,
            "status": where.status,
            "from": where.created_from,
            "to": where.created_to,
            "limit": page_size,
            "offset": (page - 1) * page_size,
        }
        with self.pool.connection() as conn, conn.transaction(), conn.cursor(row_factory=dict_row) as curs:
            curs.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
            total = curs.execute(self._sql(COUNT), params).fetchone()["total"]  # type: ignore[index]
            rows = curs.execute(self._sql(PAGE), params).fetchall()
            return total, self._records(curs, rows)

    def delivery(self, partner: str, event_id: str) -> DeliveryRecord | None:
        """One delivery of the partner by its id, with its attempts; None for another partner's."""
        with self.pool.connection() as conn, conn.cursor(row_factory=dict_row) as curs:
            rows = curs.execute(self._sql(ONE), {"partner": partner, "event_id": event_id}).fetchall()
            records = self._records(curs, rows)
        return records[0] if records else None

    def redeliver(self, partner: str, event_id: str, key: str | None = None) -> DeliveryRecord | None:
        """Makes the partner's delivery `event_id` pending and due now (see the module's docstring), once
        per Idempotency-Key `key` (a key taken before leaves it as it is); the delivery as it is then, or
        None when the partner has no such delivery."""
        params = {"partner": partner, "event_id": event_id, "key": key}
        with self.pool.connection() as conn, conn.transaction():
            if conn.execute(self._sql(ONE + " FOR UPDATE"), params).fetchone() is None:
                return None
            fresh = key is None or conn.execute(self._sql(TAKE_KEY), params).fetchone() is not None
            if fresh:
                conn.execute(self._sql(REDELIVER), params)
            if key is not None:
                conn.execute(self._sql(FORGET_KEYS))
        return self.delivery(partner, event_id)

    def _records(self, curs: Any, rows: list[dict[str, Any]]) -> list[DeliveryRecord]:
        """`rows` of the outbox as records, each with its attempts (one more query)."""
        attempts = curs.execute(self._sql(LIST_ATTEMPTS), ([row["event_id"] for row in rows],)).fetchall()
        by_event: dict[str, list[AttemptRecord]] = {}
        for attempt in attempts:
            by_event.setdefault(attempt.pop("event_id"), []).append(AttemptRecord(**attempt))
        return [
            DeliveryRecord(
                **{**row, "next_attempt_at": row["next_attempt_at"] if row["status"] == PENDING else None},
                attempts=by_event.get(row["event_id"], []),
            )
            for row in rows
        ]

    @staticmethod
    def _attempt(delivery: Delivery, attempt: Attempt) -> dict[str, Any]:
        return {
            "event_id": delivery.event_id,
            "number": delivery.attempts + 1,
            "duration_ms": attempt.duration_ms,
            "outcome": attempt.outcome,
            "response_code": attempt.response_code,
            "error": attempt.error,
            "address": attempt.address,
        }
