"""Console sessions: an auditor or operator client signs in with the credentials it already has, and the
browser keeps a short-lived session cookie; the session itself is a row of PostgreSQL.

The cookie holds a token of the service's own (`TokenService`, the bearer tokens' signing and checks) issued
for the client's console roles only, for SESSION_SECONDS, and for the console's audience: the API refuses it
as a bearer token, and the console refuses an API token as a cookie. The cookie is `HttpOnly` (no script
reads it), `SameSite=Strict` (no other site's page sends it), `Path=/console`, and `Secure` when the console
is served over TLS (directly, or behind a proxy that says so in `X-Forwarded-Proto`).

Signing in records the session (`SessionRecords`: its token's `jti`, its client and partner, its end) and
every page checks the record as well as the token, so signing out (which deletes the record) ends the
session at once on every worker and replica; each sign-in sweeps the records of expired sessions.

The sign-in and sign-out forms are taken only from the console's own pages: their `Origin` must be the
console's origin (`BROKER_LEDGER_CONSOLE_ORIGIN`, never the `Host` header); without an `Origin`,
`Sec-Fetch-Site` must say `same-origin`, or else the `Referer` be a page of that origin. Signing in counts
failures as the token endpoint does (`TokenIssuance`): the same limits per client and per address. A page
is scoped to the session's partner exactly as the API is scoped to a token's.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import datetime, timedelta
from urllib.parse import urlsplit

import anyio
from litestar import Request
from litestar.datastructures import Cookie
from psycopg import sql
from psycopg_pool import AsyncConnectionPool, ConnectionPool

from application.ports import Clock
from interface.http.auth import Audience, InvalidToken, Principal
from interface.http.problems import ApiProblem
from interface.http.security import AUDITOR, OPERATOR
from interface.shared.origins import origin_of
from interface.shared.token_issuance import TokenIssuance

COOKIE = "console_session"
PATH = "/console"
SESSION_SECONDS = 900
CONSOLE_ROLES = frozenset({AUDITOR, OPERATOR})
TABLE = "console_sessions"
POOL_WAIT_SECONDS = 3
CREATE_LOCK = int.from_bytes(
    hashlib.sha256(b"broker-ledger console sessions table").digest()[:8], "big", signed=True
)


class SignInRefused(Exception):
    """The credentials do not open the console: the status to answer, what to tell the person, and when
    to try again (for `Retry-After`) when it is a 429."""

    def __init__(self, status: int, message: str, retry_after: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = {"Retry-After": retry_after} if retry_after else {}


class NotSignedIn(Exception):
    """The request carries no valid session: the browser is sent to the sign-in page."""


@dataclass(frozen=True)
class Session:
    """Who is signed in: the client, its partner and the console roles it holds."""

    principal: Principal

    @property
    def is_auditor(self) -> bool:
        return AUDITOR in self.principal.roles


class SessionRecords:
    """The open sessions, a row each in the API's schema: a session is open while its row is there."""

    def __init__(
        self, pool: ConnectionPool, async_pool: AsyncConnectionPool, schema: str, clock: Clock
    ) -> None:
        self.pool = pool
        self.async_pool = async_pool
        self.schema = schema
        self.clock = clock
        table = sql.Identifier(schema, TABLE)
        self._create = sql.SQL(
            "CREATE TABLE IF NOT EXISTS {t} (id text PRIMARY KEY, client_id text NOT NULL,"
            " partner text NOT NULL, expires_at timestamptz NOT NULL)"
        ).format(t=table)
        self._open = sql.SQL(
            "WITH swept AS (DELETE FROM {t} WHERE expires_at <= %(now)s)"
            " INSERT INTO {t} (id, client_id, partner, expires_at)"
            " VALUES (%(id)s, %(client_id)s, %(partner)s, %(expires_at)s)"
        ).format(t=table)
        self._is_open = sql.SQL("SELECT 1 FROM {t} WHERE id = %s AND expires_at > %s").format(t=table)
        self._end = sql.SQL("DELETE FROM {t} WHERE id = %s").format(t=table)

    def create_table(self) -> None:
        with self.pool.connection(timeout=POOL_WAIT_SECONDS) as conn, conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (CREATE_LOCK,))
            conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(self.schema)))
            conn.execute(self._create)

    async def open(self, principal: Principal, expires_at: datetime) -> None:
        """Records the session of `principal`'s token, and sweeps the sessions that have expired."""
        values = {
            "now": self.clock.now(),
            "id": principal.token_id,
            "client_id": principal.client_id,
            "partner": principal.partner,
            "expires_at": expires_at,
        }
        async with self.async_pool.connection(timeout=POOL_WAIT_SECONDS) as conn:
            await conn.execute(self._open, values)

    async def is_open(self, session_id: str) -> bool:
        async with self.async_pool.connection(timeout=POOL_WAIT_SECONDS) as conn:
            cursor = await conn.execute(self._is_open, (session_id, self.clock.now()))
            return await cursor.fetchone() is not None

    async def end(self, session_id: str) -> None:
        async with self.async_pool.connection(timeout=POOL_WAIT_SECONDS) as conn:
            await conn.execute(self._end, (session_id,))


@dataclass(frozen=True)
class ConsoleSessions:
    """Signing in and out of the console, and the session of each page: `records` where the open sessions
    are kept, `origin` the console's own (the only one whose pages may post its forms)."""

    records: SessionRecords
    origin: str
    issuance: TokenIssuance  # the token endpoint's: the same failed attempts, the same tokens

    async def sign_in(self, request: Request, client_id: str, secret: str) -> tuple[Session, Cookie]:
        """The session of the client whose secret this is, when it holds a console role, and its cookie."""
        issuance = self.issuance
        address = request.client.host if request.client else None
        try:
            client = await anyio.to_thread.run_sync(issuance.authenticated_client, client_id, secret, address)
        except ApiProblem as problem:
            raise SignInRefused(problem.status_code, _refusal(problem), _retry_after(problem)) from None
        roles = client.roles & CONSOLE_ROLES
        if not roles:
            raise SignInRefused(
                403,
                f"client {client_id} holds neither the auditor nor the operator role the console is for",
            )
        tokens = issuance.tokens
        issued = tokens.issue(client, " ".join(sorted(roles)), SESSION_SECONDS, Audience.CONSOLE)
        principal = tokens.verify(issued.access_token, Audience.CONSOLE)
        await self.records.open(principal, self.records.clock.now() + timedelta(seconds=issued.expires_in))
        return Session(principal), session_cookie(request, issued.access_token, issued.expires_in)

    async def session_of(self, request: Request) -> Session:
        """The request's session; NotSignedIn without a cookie, or with one that expired, was signed out or
        is not a console session of ours."""
        principal = self._principal_of(request)
        if principal is None or not await self.records.is_open(principal.token_id):
            raise NotSignedIn
        return Session(principal)

    async def sign_out(self, request: Request) -> Cookie:
        """Ends the request's session, on every worker at once, and answers the cookie that clears it."""
        principal = self._principal_of(request)
        if principal is not None:
            await self.records.end(principal.token_id)
        return session_cookie(request, "", 0)

    def check_form_origin(self, request: Request) -> None:
        """A form posted from anywhere but the console's own pages is refused (403)."""
        origin = request.headers.get("origin")
        if origin is not None:
            same = origin == self.origin
        elif (site := request.headers.get("sec-fetch-site")) is not None:
            same = site == "same-origin"
        else:
            same = _origin_of(request.headers.get("referer")) == self.origin
        if not same:
            raise ApiProblem(403, "forbidden", "this form can only be sent from the console's own pages")

    def _principal_of(self, request: Request) -> Principal | None:
        token = request.cookies.get(COOKIE)
        if not token:
            return None
        tokens = self.issuance.tokens
        try:
            principal = tokens.verify(token, Audience.CONSOLE)
        except InvalidToken:
            return None
        return principal if principal.roles & CONSOLE_ROLES else None


def _refusal(problem: ApiProblem) -> str:
    if problem.status_code == 401:
        return "unknown client or wrong secret"
    retry = _retry_after(problem)
    return f"{problem.detail}" + (f" (in {retry} s)" if retry else "")


def _retry_after(problem: ApiProblem) -> str | None:
    return problem.headers.get("Retry-After") if problem.headers else None


def _origin_of(url: str | None) -> str | None:
    """The origin of the page a `Referer` names (scheme and host in lower case), None without one."""
    if not url:
        return None
    parts = urlsplit(url)
    try:
        port = parts.port
    except ValueError:
        return None
    if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
        return None
    return origin_of(parts.scheme, parts.hostname, port)


def session_cookie(request: Request, value: str, seconds: int) -> Cookie:
    return Cookie(
        key=COOKIE,
        value=value,
        path=PATH,
        max_age=seconds,
        httponly=True,
        secure=over_tls(request),
        samesite="strict",
    )


def over_tls(request: Request) -> bool:
    forwarded = request.headers.get("x-forwarded-proto", "").split(",")[0].strip().lower()
    return request.url.scheme == "https" or forwarded == "https"
