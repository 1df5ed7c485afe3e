"""`IdempotencyMiddleware`: a POST or PUT with an `Idempotency-Key` is run once per key, by the rules of
`interface.idempotency.keys` (which also keeps the keys' table).

How a keyed request claims its key:
- With the group committer (the default), the claim rides with the request's first save, in the same
  transaction as its events (`IdempotencyStore.claim_with_save`, put on the request's unit of work, which the
  route hands to its use case and the use case to the store): a request that writes needs no round trip
  and no commit of its own to claim its key, and its events are written only if the key is its own. The key
  is then answered as before, before the last byte of the answer leaves.
  - If the database refuses the claim (another request holds the key, or answered it), nothing of that save
    is written, and the request answers as the key's holder says: the stored answer replayed, 409 while the
    holder runs, 422 for another request. A key freed meanwhile is released again and answered 409 with
    Retry-After: the request did not run to its end, and its retry will.
  - A request that saves nothing (a refusal judged against what is recorded, a retry that finds its
    transaction made) claims its key when it answers, by the same rules, and answers as the key's holder
    says if it is not its own.
  - Two requests with one key may both run their use cases; only the one whose save carries the claim
    writes anything.
  - A save whose connection was lost at its commit and whose events were then found committed (the group
    committer reads them back, e.g. after a failover) carried its claim, but the claim's rows are lost: the
    request is answered 503 `database_unavailable` with Retry-After of a lease, and the retry of its key
    finds what it made, exactly once (`_answer_unknown`).
- With the library's recorder (`BROKER_LEDGER_GROUP_COMMIT=off`) the key is claimed first, as its own
  statement, before the request runs.

The answer is held until the key is settled, so that what the client gets is what the key keeps; an answer
over MAX_STORED_ANSWER is sent but not kept, and its key freed (see `interface.idempotency.keys`).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from datetime import datetime

import anyio.to_thread
import psycopg
from litestar.connection import ASGIConnection
from litestar.enums import ScopeType
from litestar.middleware import ASGIMiddleware
from litestar.types import ASGIApp, Message, Receive, Scope, Send
from psycopg_pool import PoolTimeout

from application.store.faults import PersistenceError
from application.store.request_writes import FirstSaveStatements
from interface.http.problems import PROBLEM_JSON, REFUSED_BEFORE_EXECUTION, ApiProblem, problem_response
from interface.http.request_ids import request_id_of
from interface.http.request_writes import open_unit_of_work
from interface.http.security import authorize_route
from interface.idempotency.keys import (
    HEADER,
    LEASE_SECONDS,
    MAX_BODY,
    MAX_STORED_ANSWER,
    IdempotencyStore,
    StoredResponse,
    fingerprint,
)

log = logging.getLogger("broker_ledger.idempotency")
REPLAYED_HEADERS = (b"content-type", b"location", b"retry-after", b"www-authenticate")
STORE_FAULTS = (psycopg.Error, PoolTimeout, PersistenceError)
# What replaces the answer a request made: the key's stored answer (replayed), or a refusal.
Replacement = StoredResponse | ApiProblem


class IdempotencyMiddleware(ASGIMiddleware):
    """The Idempotency-Key of a POST or PUT, its claims and answers kept in `store`."""

    scopes = (ScopeType.HTTP,)

    def __init__(self, store: IdempotencyStore) -> None:
        self.store = store

    async def handle(self, scope: Scope, receive: Receive, send: Send, next_app: ASGIApp) -> None:
        key = _header(scope, HEADER)
        if scope["method"] not in ("POST", "PUT") or key is None or scope.get("user") is None:
            # keys are scoped to the partner: routes open without a token (such as /connect/token) have none
            await next_app(scope, receive, send)
            return
        if not 1 <= len(key) <= 255 or "\x00" in key:
            problem = "Idempotency-Key must be 1 to 255 characters, none of them NUL"
            raise ApiProblem(400, "idempotency_key_invalid", problem)
        # a replay answers for the route, so it needs what the route needs (role, api_version)
        await authorize_route(ASGIConnection(scope), scope["route_handler"])
        body = await _read_body(receive)
        if body is None:  # the client went away before sending the whole body: nothing to answer
            return
        store = self.store
        request = KeyedRequest(scope, store, scope["user"].partner, key, fingerprint(scope, body))
        scope.setdefault("state", {})["idempotency_key"] = key
        if store.along_events is not None:
            await request.run_claiming_with_save(next_app, body, send)
            return
        claim = await store.claim(request.partner, key, request.fingerprint)
        if claim.replay is not None:
            await _send_stored(send, claim.replay)
            return
        await request.run_claimed(next_app, body, send, claim.created)


class KeyedRequest:
    """One request with an Idempotency-Key: runs it, and claims, answers or frees its key."""

    def __init__(
        self, scope: Scope, store: IdempotencyStore, partner: str, key: str, fingerprint: bytes
    ) -> None:
        self.scope = scope
        self.store = store
        self.partner = partner
        self.key = key
        self.fingerprint = fingerprint

    async def run_claimed(self, next_app: ASGIApp, body: bytes, send: Send, created: datetime) -> None:
        """Runs the request whose key it claimed (at `created`), and answers the key."""

        async def settle(response: StoredResponse) -> None:
            await self._answer(created, response)

        await self._run(next_app, body, send, settle, lambda: created)

    async def run_claiming_with_save(self, next_app: ASGIApp, body: bytes, send: Send) -> None:
        """Runs the request with its key's claim riding on its first save (on the request's unit of work);
        settles the key by what became of that claim (see the module's docstring)."""
        unit = open_unit_of_work(self.scope, self.partner)
        claim = unit.ride_with_first_save(
            [self.store.claim_with_save(self.partner, self.key, self.fingerprint)]
        )

        async def settle(response: StoredResponse) -> Replacement | None:
            created = _claimed_at(claim)
            if created is not None:
                self.store.leases.running(self.partner, self.key, created)
                await self._answer(created, response)
                return None
            if claim.refused is not None:
                return await self._held_by_another()
            if claim.unknown:
                return _answer_unknown()
            if not self._executed(response):
                return None
            return await self._claim_at_answer(response)

        await self._run(next_app, body, send, settle, lambda: _claimed_at(claim))

    async def _run(
        self,
        next_app: ASGIApp,
        body: bytes,
        send: Send,
        settle: Callable[[StoredResponse], Awaitable[Replacement | None]],
        claimed_at: Callable[[], datetime | None],
    ) -> None:
        recorder = _ResponseRecorder(send, settle)
        try:
            await next_app(self.scope, _replay_body(body), recorder.send)
        finally:
            created = claimed_at()
            if not recorder.settled and created is not None:
                await anyio.to_thread.run_sync(self.store.release, self.partner, self.key, created)
        if isinstance(recorder.replacement, ApiProblem):  # sent here: the route has answered once already
            answer = _answer_of(recorder.replacement, request_id_of(self.scope))
            await _send_stored(send, answer, replayed=False)
        elif recorder.replacement is not None:
            await _send_stored(send, recorder.replacement)

    def _executed(self, response: StoredResponse) -> bool:
        return response.status < 500 and not self.scope.get("state", {}).get(REFUSED_BEFORE_EXECUTION)

    async def _answer(self, created: datetime, response: StoredResponse) -> None:
        """Stores the answer, or frees the key, before the client has the whole answer, so that a retry right
        after it finds the key done or free."""
        # when the answer is not kept, it is true all the same and is sent; the key is freed instead, and a
        # retry runs again and finds what this request did (a create finds its transaction by the key's code)
        if self._executed(response) and self._storable(response):
            try:
                if await self.store.finish(self.partner, self.key, created, response):
                    return
            except STORE_FAULTS as error:
                log.warning(
                    "could not keep the answer of Idempotency-Key %r of %s: %s", self.key, self.partner, error
                )
        await anyio.to_thread.run_sync(self.store.release, self.partner, self.key, created)

    def _storable(self, response: StoredResponse) -> bool:
        if response.storable:
            return True
        log.warning(
            "the answer of Idempotency-Key %r of %s is %d bytes, over %d: sent, not kept; the key is freed",
            self.key,
            self.partner,
            response.size,
            MAX_STORED_ANSWER,
        )
        return False

    async def _claim_at_answer(self, response: StoredResponse) -> Replacement | None:
        """A request that saved nothing: its key claimed now, and answered; or, held by another, the holder's
        answer in its place."""
        try:
            claim = await self.store.claim(self.partner, self.key, self.fingerprint)
        except ApiProblem as refused:
            return refused
        except STORE_FAULTS as error:  # the answer stands; the key stays free for a retry
            log.warning("could not claim Idempotency-Key %r of %s: %s", self.key, self.partner, error)
            return None
        if claim.replay is not None:
            return claim.replay
        await self._answer(claim.created, response)
        return None

    async def _held_by_another(self) -> Replacement:
        """The answer of a request whose claim the database refused at its save: the holder's."""
        try:
            claim = await self.store.claim(self.partner, self.key, self.fingerprint)
        except ApiProblem as refused:
            return refused
        if claim.replay is not None:
            return claim.replay
        await anyio.to_thread.run_sync(self.store.release, self.partner, self.key, claim.created)
        return ApiProblem(
            409,
            "idempotency_request_in_progress",
            "a request with this Idempotency-Key ran at the same time; retry it",
            headers={"Retry-After": "1"},
        )


def _answer_unknown() -> ApiProblem:
    """503 for a request whose save committed while the connection carrying its commit was lost (a failover,
    a restart: found by reading the events back): its key's claim committed with it, but what the claim
    returned is lost, so the answer cannot be kept under the key. The client retries the same key once the
    claim's lease lapses, and that retry answers what was committed (a create finds its transaction)."""
    return ApiProblem(
        503,
        "database_unavailable",
        "the database connection was lost while this request's changes were committed; they are kept. "
        "Retry with the same Idempotency-Key after the time in Retry-After to get the answer",
        headers={"Retry-After": str(LEASE_SECONDS)},
    )


def _claimed_at(claim: FirstSaveStatements) -> datetime | None:
    """When the key's claim that rode with a save was made (None while no save carried it)."""
    return claim.rows[0][0][0] if claim.rows else None


def _header(scope: Scope, name: bytes) -> str | None:
    for header, value in scope["headers"]:
        if header == name:
            return value.decode("latin-1")
    return None


async def _read_body(receive: Receive) -> bytes | None:
    """The whole body, or None when the client disconnected before sending all of it."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > MAX_BODY:
            raise ApiProblem(413, "request_too_large", f"request bodies are limited to {MAX_BODY} bytes")
        chunks.append(chunk)
        if not message.get("more_body", False):
            break
    return b"".join(chunks)


def _replay_body(body: bytes) -> Receive:
    sent = False

    async def receive() -> Message:
        nonlocal sent
        if sent:
            return {"type": "http.disconnect"}
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    return receive


class _ResponseRecorder:
    """Holds the request's answer until its key is settled (`on_complete`), then sends it, or leaves it
    unsent when `on_complete` gives what replaces it (`replacement`)."""

    def __init__(
        self, send: Send, on_complete: Callable[[StoredResponse], Awaitable[Replacement | None]]
    ) -> None:
        self._send = send
        self._on_complete = on_complete
        self.status: int | None = None
        self.headers: list[tuple[str, str]] = []
        self.chunks: list[bytes] = []
        self._held: list[Message] = []
        self.settled = False  # the answer stored or the key released (or the answer replaced)
        self.replacement: Replacement | None = None

    async def send(self, message: Message) -> None:
        if self.replacement is not None:  # the request's own answer is dropped, whatever follows
            return
        if message["type"] == "http.response.start":
            self.status = message["status"]
            self.headers = [
                (name.decode("latin-1"), value.decode("latin-1"))
                for name, value in message.get("headers", [])
                if name.lower() in REPLAYED_HEADERS
            ]
            self._held.append(message)
            return
        if message["type"] == "http.response.body":
            self.chunks.append(message.get("body", b""))
            self._held.append(message)
            if message.get("more_body", False) or self.status is None:
                return
            response = StoredResponse(self.status, self.headers, b"".join(self.chunks))
            self.replacement = await self._on_complete(response)
            self.settled = True
            if self.replacement is not None:
                return
        held, self._held = self._held, []
        for held_message in held:
            await self._send(held_message)
        if message["type"] not in ("http.response.start", "http.response.body"):
            await self._send(message)


def _answer_of(problem: ApiProblem, request_id: str | None) -> StoredResponse:
    """A refusal as the answer the app's problem handler would send (naming the request it answers)."""
    response = problem_response(
        problem.status_code,
        problem.code,
        problem.detail,
        problem.errors,
        headers=problem.headers,
        request_id=request_id,
    )
    headers = [("content-type", PROBLEM_JSON), *(problem.headers or {}).items()]
    return StoredResponse(problem.status_code, headers, response.render(response.content, PROBLEM_JSON))


async def _send_stored(send: Send, stored: StoredResponse, replayed: bool = True) -> None:
    headers = [(name.encode("latin-1"), value.encode("latin-1")) for name, value in stored.headers]
    if replayed:
        headers.append((b"idempotent-replayed", b"true"))
    headers.append((b"content-length", str(len(stored.body)).encode()))
    await send({"type": "http.response.start", "status": stored.status, "headers": headers})
    await send({"type": "http.response.body", "body": stored.body, "more_body": False})
