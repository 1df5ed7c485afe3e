"""`Idempotency-Key` on POST and PUT, stored durably in PostgreSQL, scoped to the partner.

The rules, as Stripe documents them:
- The same key with the same request within 24 hours replays the first response byte for byte (with
  `Idempotent-Replayed: true`); the same key with another request is 422 `idempotency_key_reused`; the same
  key while the first request still runs is 409. "The same request" is the same method, path, query string,
  `api_version` and body (`fingerprint`).
- A response is stored only once a use case ran on a complete, well-formed request: a body cut off by a
  client that went away, a refusal of the request as sent (400, 413, 415, a body that breaks the schema), a
  refusal of its content alone (a domain error that `judges_request_only`, such as an unknown payment
  method or an amount too precise) and a 5xx store nothing, so the key stays free for the corrected request
  or the retry. Refusals judged against what is recorded (limits, states, reserves, not found) are stored.
- A stored answer is at most MAX_STORED_ANSWER bytes (body and headers), a bound no well-formed answer
  reaches (refusals are small by construction; the largest answers are a customer's accounts). An answer over
  it is a fault of ours: it is sent as made but not kept, and the key is freed (as when the database cannot
  take an answer), so a retry runs the request again rather than replaying it (a create finds the
  transaction its first run recorded). It never reaches the database: one oversized answer must not load
  the event store's committer, whose transactions carry the answers.
- A request that died while running (its lease lapsed) may be taken over by its retry, and only the request
  holding the claim may store the answer: a late first request cannot overwrite its retry's.
- Creates are safe to rerun because their transaction code derives from partner, route and key
  (`transaction_code_for`), so the rerun finds the transaction the first run recorded; a create whose code
  exists with another request (the key reused after 24 hours or after a 5xx) is 422
  `idempotency_key_reused`, never the other transaction.

When a key is claimed is the middleware's (`interface.idempotency.middleware`): with the group committer, in
the transaction of the request's first save (`claim_with_save`: the save's events are written only if the key
is the request's), or as the request answers when it saved nothing; with the library's recorder
(`BROKER_LEDGER_GROUP_COMMIT=off`), before the request runs.

Claims made apart from a save and answers of concurrent requests go to the database together
(`StatementBatches`): one statement claims every key waiting, one stores every answer waiting, so under load
the requests share round trips and commits; keys stay independent (one key's refusal or replay is its own).
Those statements ride in the event store's group-commit transactions (`along_events`, the committer's
`write_along`), with the events saved at that moment or alone, so they need no transaction of their own;
with the library's recorder they run on an async pool of their own.

Leases are short and renewed (`Leases`) while their requests run, so the claim of a process that was killed
lapses within LEASE_SECONDS rather than blocking its retries for a minute. A claim whose release failed
because the database was down is released again once it is back. A request waits at most POOL_WAIT_SECONDS
for a connection, so an unreachable database gives a prompt 503 rather than a hang.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime

import psycopg
from litestar import Request
from litestar.types import Scope
from psycopg import sql
from psycopg_pool import AsyncConnectionPool, ConnectionPool, PoolTimeout

from application.store.binary_arrays import (
    ByteaArray,
    Int4Array,
    TextArray,
    TimestamptzArray,
    columns,
)
from application.store.request_writes import BatchedRow
from application.store.statement_batches import StatementBatches
from interface.http.dependencies import principal
from interface.http.problems import ApiProblem

HEADER = b"idempotency-key"
MAX_BODY = 64 * 1024
MAX_STORED_ANSWER = 1024 * 1024  # bytes of an answer (body and headers) kept under a key; see the docstring
LEASE_SECONDS = 10  # a running claim nobody renews (its process died or lost the database) lapses after this
RENEW_SECONDS = 2  # how often a process renews the leases of its running requests
POOL_WAIT_SECONDS = 5  # the longest a request waits for a connection (as the event store's pool)
KEEP_HOURS = 24
log = logging.getLogger("broker_ledger.idempotency")


CREATE_LOCK = int.from_bytes(
    hashlib.sha256(b"broker-ledger idempotency keys table").digest()[:8], "big", signed=True
)


def transaction_code_for(partner: str, route: str, key: str) -> str:
    """The code a transaction created under an idempotency key gets: the same on every retry of the same
    route, another on another route (a buy and a sell never share one)."""
    return "TX" + hashlib.sha256(f"{partner}\x1f{route}\x1f{key}".encode()).hexdigest()[:16].upper()


def fingerprint(scope: Scope, body: bytes) -> bytes:
    """What makes two requests under one key the same request: method, path, query string, api_version and
    body."""
    versions = [value for name, value in scope["headers"] if name == b"api_version"]
    parts = [
        scope["method"].encode(),
        scope["path"].encode(),
        scope.get("query_string", b""),
        *versions,
        body,
    ]
    return hashlib.sha256(b"\x1f".join(parts)).digest()


@dataclass(frozen=True)
class StoredResponse:
    status: int
    headers: list[tuple[str, str]]
    body: bytes

    @property
    def size(self) -> int:
        """Bytes of its body and headers, as MAX_STORED_ANSWER counts them."""
        return len(self.body) + sum(len(name) + len(value) for name, value in self.headers)

    @property
    def storable(self) -> bool:
        """Small enough to keep under its key (MAX_STORED_ANSWER)."""
        return self.size <= MAX_STORED_ANSWER


@dataclass(frozen=True)
class Claim:
    """The outcome of claiming a key: ours to run, a replay, or a refusal."""

    owned: bool
    replay: StoredResponse | None = None
    created: datetime | None = None  # of an owned claim: tells it from a later claim of the same key


# Claims, the rows holding keys not claimed, and answers, for several keys at once (of concurrent requests,
# never one key twice in a statement): a key is claimed when it is new, older than KEEP_HOURS, or its
# running claim's lease lapsed with the same request (a retry takes it over). A lone request's claim and
# answer take the statements `_ONE`, with plain parameters: building and unnesting arrays for one key cost
# it about 0.15 ms of Python and as much of PostgreSQL each way.
CLAIMED_UNLESS_HELD = (
    " ON CONFLICT (partner, key) DO UPDATE SET fingerprint = excluded.fingerprint,"
    " state = 'running', lease_until = excluded.lease_until, created = now(),"
    " status = NULL, headers = NULL, body = NULL"
    " WHERE t.created < now() - make_interval(hours => %s)"
    " OR (t.state = 'running' AND t.lease_until < now()"
    " AND t.fingerprint = excluded.fingerprint)"
    " RETURNING t.partner, t.key, t.created"
)
CLAIM_MANY = (
    "INSERT INTO {t} AS t (partner, key, fingerprint, state, lease_until)"
    " SELECT c.partner, c.key, c.fingerprint, 'running', now() + make_interval(secs => %s)"
    " FROM unnest(%s::text[], %s::text[], %s::bytea[]) AS c (partner, key, fingerprint)"
    " ORDER BY c.partner, c.key" + CLAIMED_UNLESS_HELD
)
CLAIM_ONE = (
    "INSERT INTO {t} AS t (partner, key, fingerprint, state, lease_until)"
    " VALUES (%s, %s, %s, 'running', now() + make_interval(secs => %s))" + CLAIMED_UNLESS_HELD
)
SELECT_CLAIMED_MANY = (
    "SELECT t.partner, t.key, t.fingerprint, t.state, t.status, t.headers, t.body"
    " FROM {t} t JOIN unnest(%s::text[], %s::text[]) AS c (partner, key) USING (partner, key)"
)
SELECT_CLAIMED_ONE = (
    "SELECT t.partner, t.key, t.fingerprint, t.state, t.status, t.headers, t.body"
    " FROM {t} t WHERE t.partner = %s AND t.key = %s"
)
RENEW_MANY = (
    "UPDATE {t} AS t SET lease_until = now() + make_interval(secs => %s)"
    " FROM (SELECT t.partner, t.key FROM {t} t"
    " JOIN unnest(%s::text[], %s::text[], %s::timestamptz[]) AS r (partner, key, created)"
    " USING (partner, key, created) WHERE t.state = 'running' FOR UPDATE OF t SKIP LOCKED) AS due"
    " WHERE t.partner = due.partner AND t.key = due.key"
)
FINISH_MANY = (
    "UPDATE {t} AS t SET state = 'done', status = f.status, headers = f.headers::jsonb, body = f.body"
    " FROM unnest(%s::int[], %s::text[], %s::bytea[], %s::text[], %s::text[], %s::timestamptz[])"
    " AS f (status, headers, body, partner, key, created)"
    " WHERE t.partner = f.partner AND t.key = f.key AND t.created = f.created AND t.state = 'running'"
    " RETURNING t.partner, t.key, t.created"
)
FINISH_ONE = (
    "UPDATE {t} AS t SET state = 'done', status = %s, headers = %s::jsonb, body = %s"
    " WHERE t.partner = %s AND t.key = %s AND t.created = %s AND t.state = 'running'"
    " RETURNING t.partner, t.key, t.created"
)
# Claims that must not fail quietly: each rides with a request's first save (`claim_with_save`), whose events
# are written only if the key is the request's, and the claims of the saves of one group commit go as one
# call (`BatchedRow`). Claimed by the rules above (CLAIM_MANY itself, on the function's arguments), each
# claim answered by its position among the arguments; or, if any key is held, refused with
# unique_violation: the batch is then written save by save, its claims one by one, and that refusal fails
# the one save holding a held key alone.
CLAIM_ARGUMENTS = ("lease_seconds", "claim_partners", "claim_keys", "claim_fingerprints", "keep_hours")
CLAIMS_OR_RAISE = (
    """
CREATE OR REPLACE FUNCTION {f}(
    claim_partners text[], claim_keys text[], claim_fingerprints bytea[],
    lease_seconds integer, keep_hours integer
) RETURNS TABLE (claim_position bigint, claimed timestamptz) LANGUAGE plpgsql AS $$
DECLARE
    claims_made bigint;
    held record;
BEGIN
    RETURN QUERY WITH claim AS ("""
    + CLAIM_MANY % CLAIM_ARGUMENTS
    + """)
    SELECT c.n, claim.created FROM claim
    JOIN unnest(claim_partners, claim_keys) WITH ORDINALITY AS c (partner, key, n) USING (partner, key);
    GET DIAGNOSTICS claims_made = ROW_COUNT;
    IF claims_made < cardinality(claim_keys) THEN
        SELECT t.partner, t.key INTO held FROM {t} t
        JOIN unnest(claim_partners, claim_keys) AS c (partner, key) USING (partner, key)
        WHERE t.created <> now() LIMIT 1;
        RAISE EXCEPTION 'Idempotency-Key % of % is held by another request', held.key, held.partner
            USING ERRCODE = 'unique_violation';
    END IF;
END
$$
"""
)


def _claims_with_saves(claims: Sequence[tuple[str, str, bytes]]) -> Sequence[object]:
    """The arguments of the claims function for these (partner, key, fingerprint) rows, in their order."""
    return (*columns(claims, TextArray, TextArray, ByteaArray), LEASE_SECONDS, KEEP_HOURS)


# Refusals of a batch's data: the batch is run again key by key, so only the offending request fails.
REFUSED_DATA = (psycopg.errors.DataError, psycopg.errors.IntegrityError, psycopg.errors.ProgrammingError)
# Statements run in the event store's next transaction; the rows each returned (the group committer's
# `write_along`).
AlongEvents = Callable[[list[tuple[str, Sequence[object]]]], Awaitable[list[list[tuple]]]]


class IdempotencyStore:
    """The keys' table. Requests claim and answer keys on the event loop: in the event store's next
    transaction when `along_events` is given (the group committer's `write_along`: a claim or an answer
    then shares the transaction, commit and round trip of the events written with it, and needs none of
    its own), else on `async_pool` (from a worker thread each statement would cost a thread hop besides).
    The lease thread and releases use `pool`."""

    def __init__(
        self,
        pool: ConnectionPool,
        schema: str,
        async_pool: AsyncConnectionPool,
        along_events: AlongEvents | None = None,
    ) -> None:
        self.pool = pool
        self.async_pool = async_pool
        self.along_events = along_events
        self.table = sql.Identifier(schema, "idempotency_keys")
        self.schema = schema
        self.leases = Leases(self)
        self._claim_many, self._claim_one, self._select_claimed_many, self._select_claimed_one = (
            sql.SQL(statement).format(t=self.table).as_string()
            for statement in (CLAIM_MANY, CLAIM_ONE, SELECT_CLAIMED_MANY, SELECT_CLAIMED_ONE)
        )
        self._claims_function = sql.Identifier(schema, "claim_idempotency_keys")
        self._claims_or_raise = (
            sql.SQL("SELECT claim_position, claimed FROM {f}(%s, %s, %s, %s::int, %s::int)")
            .format(f=self._claims_function)
            .as_string()
        )
        self._finish_many, self._finish_one, self._renew_many = (
            sql.SQL(statement).format(t=self.table).as_string()
            for statement in (FINISH_MANY, FINISH_ONE, RENEW_MANY)
        )
        self._claims = StatementBatches(self._claim_batch, key=_partner_and_key, split_on=REFUSED_DATA)
        self._finishes = StatementBatches(self._finish_batch, key=_partner_and_key, split_on=REFUSED_DATA)

    def create_table(self) -> None:
        """Creates the schema and table if missing; workers starting together take turns (two concurrent
        `CREATE ... IF NOT EXISTS` can both pass the check, and the loser fails on the catalog's index)."""
        with self.pool.connection(timeout=POOL_WAIT_SECONDS) as conn, conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (CREATE_LOCK,))
            conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(self.schema)))
            conn.execute(
                sql.SQL(
                    "CREATE TABLE IF NOT EXISTS {} ("
                    " partner text NOT NULL, key text NOT NULL, fingerprint bytea NOT NULL,"
                    " state text NOT NULL, lease_until timestamptz NOT NULL,"
                    " status integer, headers jsonb, body bytea,"
                    " created timestamptz NOT NULL DEFAULT now(), PRIMARY KEY (partner, key))"
                ).format(self.table)
            )
            conn.execute(sql.SQL(CLAIMS_OR_RAISE).format(f=self._claims_function, t=self.table))

    def claim_with_save(self, partner: str, key: str, fingerprint: bytes) -> BatchedRow:
        """The claim of `key` as a row to ride with the request's first save (see
        `RequestWrites.ride_with_first_save`, `application.store.request_writes`), sent with the other claims
        of its batch: by the rules of `claim`, it returns the claim's `created` if the key is now the
        request's, else the database refuses it, and the save with it."""
        return BatchedRow(self._claims_or_raise, (partner, key, fingerprint), _claims_with_saves)

    async def claim(self, partner: str, key: str, fingerprint: bytes) -> Claim:
        owned, row = await self._claims.submit((partner, key, fingerprint))
        if owned is not None:  # committed: only now is the lease this process's to renew
            self.leases.running(partner, key, owned)
            return Claim(owned=True, created=owned)
        return _refusal_or_replay(row, fingerprint)

    async def finish(self, partner: str, key: str, created: datetime, response: StoredResponse) -> bool:
        """Stores the answer of the request that claimed `key` at `created`; False (nothing stored) when
        that claim is no longer this request's (its lease lapsed and a retry took it over)."""
        finished = await self._finishes.submit((partner, key, created, response))
        self.leases.ended(partner, key)
        if not finished:
            log.warning(
                "Idempotency-Key %r of %s was taken over by a retry; its answer is not stored", key, partner
            )
            return False
        return True

    async def _claim_batch(
        self, claims: list[tuple[str, str, bytes]]
    ) -> list[tuple[datetime | None, tuple | None]]:
        """Claims these keys (each once) in one statement: per key, the `created` of its claim if it is now
        ours, else the row that holds it (None if there is none any more)."""
        claim = self._claim_statement(claims)
        if self.along_events is not None:  # the rows holding keys are read in the same round trip
            claimed, found = await self.along_events([claim, self._held_statement(claims)])
            owned = {(partner, key): created for partner, key, created in claimed}
        else:
            async with self.async_pool.connection(timeout=POOL_WAIT_SECONDS) as conn:
                cursor = await conn.execute(*claim, binary=True)
                owned = {(partner, key): created for partner, key, created in await cursor.fetchall()}
                others = [claimed for claimed in claims if claimed[:2] not in owned]
                found = []
                if others:
                    cursor = await conn.execute(*self._held_statement(others), binary=True)
                    found = await cursor.fetchall()
        held = {(row[0], row[1]): tuple(row[2:]) for row in found if (row[0], row[1]) not in owned}
        return [(owned.get((p, k)), held.get((p, k))) for p, k, _ in claims]

    def _claim_statement(self, claims: list[tuple[str, str, bytes]]) -> tuple[str, tuple]:
        """The claim of these keys; CLAIM_MANY claims them in one order (partner, key): two batches claiming
        some of the same keys lock their rows in the same order, so neither can deadlock the other."""
        if len(claims) == 1:
            [(partner, key, fingerprint)] = claims
            return self._claim_one, (partner, key, fingerprint, LEASE_SECONDS, KEEP_HOURS)
        # binary parameters: arrays in text are escaped item by item, in Python
        partners, keys, fingerprints = columns(claims, TextArray, TextArray, ByteaArray)
        return self._claim_many, (LEASE_SECONDS, partners, keys, fingerprints, KEEP_HOURS)

    def _held_statement(self, claims: list[tuple[str, str, bytes]]) -> tuple[str, tuple]:
        """The rows of these keys as they stand."""
        if len(claims) == 1:
            return self._select_claimed_one, claims[0][:2]
        return self._select_claimed_many, (
            TextArray(p for p, _, _ in claims),
            TextArray(k for _, k, _ in claims),
        )

    async def _finish_batch(self, answers: list[tuple[str, str, datetime, StoredResponse]]) -> list[bool]:
        """Stores these answers in one statement: per answer, whether its claim was still its request's."""
        rows = [_finished(*answer) for answer in sorted(answers, key=_partner_and_key)]
        if len(rows) == 1:
            statement, parameters = self._finish_one, list(rows[0])
        else:
            statement, parameters = self._finish_many, columns(rows, *FINISHED_COLUMNS)
        if self.along_events is not None:
            [finished] = await self.along_events([(statement, parameters)])
        else:
            async with self.async_pool.connection(timeout=POOL_WAIT_SECONDS) as conn:
                cursor = await conn.execute(statement, parameters, binary=True)
                finished = await cursor.fetchall()
        done = {(partner, key, created) for partner, key, created in finished}
        return [(partner, key, created) in done for partner, key, created, _ in answers]

    def release(self, partner: str, key: str, created: datetime | None = None) -> None:
        """Forgets a claim whose request failed for a passing reason, so a retry runs it again. When the
        database cannot be reached the claim is released later, by `Leases`, once it can."""
        self.leases.ended(partner, key)
        try:
            self.forget([(partner, key, created)])
        except (psycopg.Error, PoolTimeout) as error:
            log.warning(
                "could not release Idempotency-Key %r of %s now (%s); will retry", key, partner, error
            )
            self.leases.release_later(partner, key, created)

    def forget(self, claims: list[tuple[str, str, datetime | None]]) -> None:
        """Deletes these running claims (a claim taken over since, with another `created`, is kept)."""
        with self.pool.connection(timeout=POOL_WAIT_SECONDS) as conn:
            conn.cursor().executemany(
                sql.SQL(
                    "DELETE FROM {} WHERE partner = %s AND key = %s AND state = 'running'"
                    " AND (%s::timestamptz IS NULL OR created = %s::timestamptz)"
                ).format(self.table),
                [(partner, key, created, created) for partner, key, created in claims],
            )

    def renew(self, claims: list[tuple[str, str, datetime]]) -> None:
        """Extends the leases of these running claims (of requests still running in this process), in one
        statement that waits for no lock: a claim locked meanwhile is being answered or released, and
        needs no longer lease. (Renewing key by key in one transaction held each renewed claim's lock
        until the last was renewed; a batch of answers locking the same claims in another order
        deadlocked with it, and stalled every answer of the process for PostgreSQL's deadlock_timeout.)"""
        partners, keys, created = (list(column) for column in zip(*claims, strict=True))
        with self.pool.connection(timeout=POOL_WAIT_SECONDS) as conn:
            conn.execute(self._renew_many, (LEASE_SECONDS, partners, keys, created))


class Leases:
    """The claims this process holds: renews the leases of those still running every RENEW_SECONDS, and
    releases those whose release failed (database down) once the database answers again. One daemon thread,
    started with the first claim, touching the database only when it has something to do."""

    def __init__(self, store: IdempotencyStore) -> None:
        self.store = store
        self._lock = threading.Lock()
        self._running: dict[tuple[str, str], datetime] = {}
        self._to_release: dict[tuple[str, str], datetime | None] = {}
        self._thread: threading.Thread | None = None

    def running(self, partner: str, key: str, created: datetime) -> None:
        with self._lock:
            self._running[partner, key] = created
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="idempotency-leases", daemon=True)
                self._thread.start()

    def ended(self, partner: str, key: str) -> None:
        with self._lock:
            self._running.pop((partner, key), None)

    def release_later(self, partner: str, key: str, created: datetime | None) -> None:
        with self._lock:
            self._to_release[partner, key] = created

    def _loop(self) -> None:
        while True:  # as long as the process: a daemon thread
            time.sleep(RENEW_SECONDS)
            with self._lock:
                running = [(partner, key, created) for (partner, key), created in self._running.items()]
                to_release = [(partner, key, created) for (partner, key), created in self._to_release.items()]
            try:
                if running:
                    self.store.renew(running)
                if to_release:
                    self.store.forget(to_release)
                    self._released(to_release)
            except Exception as error:  # the database is down or the pool closed: try again later
                log.debug("idempotency leases not renewed or released yet: %s", error)

    def _released(self, claims: list[tuple[str, str, datetime | None]]) -> None:
        with self._lock:
            for partner, key, created in claims:
                if (partner, key) in self._to_release and self._to_release[partner, key] == created:
                    del self._to_release[partner, key]


FINISHED_COLUMNS = (Int4Array, TextArray, ByteaArray, TextArray, TextArray, TimestamptzArray)


def _finished(partner: str, key: str, created: datetime, response: StoredResponse) -> tuple[object, ...]:
    return (response.status, json.dumps(response.headers), response.body, partner, key, created)


def _partner_and_key(item: tuple) -> tuple[str, str]:
    return item[0], item[1]


def _refusal_or_replay(row: tuple | None, fingerprint: bytes) -> Claim:
    if row is None:  # claimed and released meanwhile: let the client retry
        raise ApiProblem(
            409, "idempotency_request_in_progress", "a request with this Idempotency-Key is running"
        )
    stored_fingerprint, state, status, headers, body = row
    if bytes(stored_fingerprint) != fingerprint:
        raise ApiProblem(
            422,
            "idempotency_key_reused",
            "this Idempotency-Key was used for a different request in the last 24 hours; use a new key",
        )
    if state != "done":
        raise ApiProblem(
            409,
            "idempotency_request_in_progress",
            "a request with this Idempotency-Key is still running; retry when it has finished",
            headers={"Retry-After": "1"},
        )
    return Claim(owned=False, replay=StoredResponse(status, [tuple(h) for h in headers], bytes(body)))


def code_for(request: Request, key: str | None) -> str | None:
    """The transaction code of a create under an idempotency key, so a retry of the same route finds the
    first one."""
    if not key:
        return None
    return transaction_code_for(principal(request).partner, request.scope["path_template"], key)
