"""Console sessions: an auditor or operator client signs in with the credentials it already has, and the
browser keeps a short-lived session cookie.

The cookie holds a token of the service's own (`TokenService`, the bearer tokens' signing and checks) issued
for the client's console roles only, for SESSION_SECONDS: `HttpOnly` (no script reads it), `SameSite=Strict`
(no other site's page sends it, which also keeps other sites from posting the console's forms),
`Path=/console`, and `Secure` when the console is served over TLS (directly, or behind a proxy that says so
in `X-Forwarded-Proto`). Signing in counts failures as the token endpoint does (`TokenIssuance`): the same
limits per client and per address. A page is scoped to the session's partner exactly as the API is scoped
to a token's.
"""

from __future__ import annotations

from dataclasses import dataclass

import anyio
from litestar import Request
from litestar.datastructures import Cookie

from interface.http.auth import InvalidToken, Principal, TokenService
from interface.http.problems import ApiProblem
from interface.http.security import AUDITOR, OPERATOR
from interface.tokens.issuance import TokenIssuance

COOKIE = "console_session"
PATH = "/console"
SESSION_SECONDS = 900
CONSOLE_ROLES = frozenset({AUDITOR, OPERATOR})


class SignInRefused(Exception):
    """The credentials do not open the console: the status to answer and what to tell the person."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class NotSignedIn(Exception):
    """The request carries no valid session: the browser is sent to the sign-in page."""


@dataclass(frozen=True)
class Session:
    """Who is signed in: the client, its partner and the console roles it holds."""

    principal: Principal

    @property
    def is_auditor(self) -> bool:
        return AUDITOR in self.principal.roles


async def sign_in(request: Request, client_id: str, secret: str) -> tuple[Session, Cookie]:
    """The session of the client whose secret this is, when it holds a console role, and its cookie."""
    issuance = TokenIssuance.of(request.app.state)
    address = request.client.host if request.client else None
    try:
        client = await anyio.to_thread.run_sync(issuance.authenticated_client, client_id, secret, address)
    except ApiProblem as problem:
        raise SignInRefused(problem.status_code, _refusal(problem)) from None
    roles = client.roles & CONSOLE_ROLES
    if not roles:
        raise SignInRefused(
            403,
            f"client {client_id} holds neither the auditor nor the operator role the console is for",
        )
    issued = issuance.tokens.issue(client, " ".join(sorted(roles)), lifetime_seconds=SESSION_SECONDS)
    session = Session(Principal(client.client_id, client.partner, roles))
    return session, session_cookie(request, issued.access_token, SESSION_SECONDS)


def _refusal(problem: ApiProblem) -> str:
    if problem.status_code == 401:
        return "unknown client or wrong secret"
    retry = problem.headers.get("Retry-After") if problem.headers else None
    return f"{problem.detail}" + (f" (in {retry} s)" if retry else "")


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


def signed_out(request: Request) -> Cookie:
    """The cookie that ends the session in the browser."""
    return session_cookie(request, "", 0)


def over_tls(request: Request) -> bool:
    forwarded = request.headers.get("x-forwarded-proto", "").split(",")[0].strip().lower()
    return request.url.scheme == "https" or forwarded == "https"


def session_of(request: Request) -> Session:
    """The request's session; NotSignedIn without a cookie, or with one that expired or was not ours."""
    token = request.cookies.get(COOKIE)
    if not token:
        raise NotSignedIn
    tokens: TokenService = request.app.state.tokens
    try:
        principal = tokens.verify(token)
    except InvalidToken:
        raise NotSignedIn from None
    if not principal.roles & CONSOLE_ROLES:
        raise NotSignedIn
    return Session(principal)
