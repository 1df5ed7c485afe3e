"""Access tokens: signed JWTs for OAuth2 client credentials, and a limiter for failed attempts.

The algorithm is fixed to HS256, both when signing and when verifying, so a token cannot choose how
it is checked (`alg: none`, HS512, or an RS256 header meant to confuse keys are all refused). `iss`,
`aud` and `exp` are required; times are checked against the injected clock, with a few seconds of
leeway for clock skew: `exp`, `iat` and, when the token has one, `nbf` (a token is not valid before it).

A token says what it is for in its `aud`: the API (`[tokens] audience`) or the web console
(`[tokens] console_audience`), and each is checked for its own only: a console session's token is refused
as a bearer token, and an API token as a console session.
"""

from __future__ import annotations

import math
import secrets
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import jwt

from application.credentials import ClientRecord
from application.ports import Clock
from interface.http.settings import TokenSettings

ALGORITHM = "HS256"
LEEWAY_SECONDS = 5
VERIFIED_TOKENS_KEPT = 4096
REQUIRED_CLAIMS = ["iss", "aud", "sub", "partner", "roles", "iat", "exp", "jti"]


class InvalidToken(Exception):
    """The bearer token is missing, malformed, forged, expired or meant for someone else."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class InvalidScope(Exception):
    """The requested scope names roles the client does not hold."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True, kw_only=True)
class IssuedToken:
    access_token: str
    token_type: str = "Bearer"
    expires_in: int
    scope: str


class Audience(StrEnum):
    """What a token is for: the API (a bearer token) or the web console (a session's cookie)."""

    API = "api"
    CONSOLE = "console"


@dataclass(frozen=True)
class Principal:
    client_id: str
    partner: str
    roles: frozenset[str]
    token_id: str = field(default="", compare=False)  # the token's `jti`: a console session's id


_REASONS: list[tuple[type[jwt.PyJWTError], str]] = [
    (jwt.InvalidAlgorithmError, "the token is not signed with the expected algorithm"),
    (jwt.InvalidSignatureError, "the token signature is not valid"),
    (jwt.ExpiredSignatureError, "the token has expired"),
    (jwt.InvalidAudienceError, "the token is meant for another audience"),
    (jwt.InvalidIssuerError, "the token was issued by someone else"),
    (jwt.DecodeError, "the token is not a well-formed JWT"),
]


def _reason(error: jwt.PyJWTError) -> str:
    if isinstance(error, jwt.MissingRequiredClaimError):
        return f"the token has no {error.claim!r} claim"
    for kind, reason in _REASONS:
        if isinstance(error, kind):
            return reason
    return f"the token is not valid: {error}"


class TokenService:
    def __init__(
        self,
        settings: TokenSettings,
        signing_key: bytes,
        clock: Clock,
        *,
        leeway_seconds: int = LEEWAY_SECONDS,
    ) -> None:
        self._settings = settings
        self._key = signing_key
        self._clock = clock
        self._leeway = leeway_seconds
        # Tokens whose signature, issuer, audience and claims have been checked, with what they say, by the
        # audience they were checked for. The times are checked again on every use; the size is bounded by
        # emptying it when full.
        self._verified: dict[tuple[Audience, str], tuple[dict[str, Any], Principal]] = {}

    def issue(
        self,
        client: ClientRecord,
        scope: str | None = None,
        lifetime_seconds: int | None = None,
        audience: Audience = Audience.API,
    ) -> IssuedToken:
        """A token for `client` with the roles named in `scope` (space-separated), default all, meant for
        `audience`; valid for the settings' lifetime, or `lifetime_seconds` when shorter (a console
        session)."""
        roles = self._granted_roles(client, scope)
        now = int(self._clock.now().timestamp())
        lifetime = min(self._settings.lifetime_seconds, lifetime_seconds or self._settings.lifetime_seconds)
        claims = {
            "iss": self._settings.issuer,
            "aud": self._audience_claim(audience),
            "sub": client.client_id,
            "partner": client.partner,
            "roles": sorted(roles),
            "iat": now,
            "exp": now + lifetime,
            "jti": secrets.token_urlsafe(16),
        }
        token = jwt.encode(claims, self._key, algorithm=ALGORITHM)
        return IssuedToken(access_token=token, expires_in=lifetime, scope=" ".join(sorted(roles)))

    def verify(self, token: str, audience: Audience = Audience.API) -> Principal:
        """The principal the token speaks for, when it is meant for `audience`; `InvalidToken` if it cannot be
        trusted, or is meant for the other audience."""
        verified = self._verified.get((audience, token))
        if verified is None:
            claims = self._decode(token, audience)
            verified = (claims, _principal(claims))
            if len(self._verified) >= VERIFIED_TOKENS_KEPT:
                self._verified.clear()
            self._verified[(audience, token)] = verified
        claims, principal = verified
        self._check_times(claims)
        return principal

    def _audience_claim(self, audience: Audience) -> str:
        if audience is Audience.CONSOLE:
            return self._settings.console_audience
        return self._settings.audience

    def _decode(self, token: str, audience: Audience) -> dict[str, Any]:
        try:
            return jwt.decode(
                token,
                self._key,
                algorithms=[ALGORITHM],
                audience=self._audience_claim(audience),
                issuer=self._settings.issuer,
                # Times (exp, iat, nbf) are checked in `_check_times` against our clock, not the library's.
                options={
                    "require": REQUIRED_CLAIMS,
                    "verify_exp": False,
                    "verify_iat": False,
                    "verify_nbf": False,
                    "strict_aud": True,
                },
            )
        except jwt.PyJWTError as error:
            raise InvalidToken(_reason(error)) from None

    def _check_times(self, claims: dict[str, Any]) -> None:
        exp, iat = claims["exp"], claims["iat"]
        if not all(_is_number(value) for value in (exp, iat)):
            raise InvalidToken("the token's 'exp' and 'iat' claims must be numbers")
        not_before = claims.get("nbf", iat)  # optional (RFC 7519): without one, valid from its issue
        if not _is_number(not_before):
            raise InvalidToken("the token's 'nbf' claim must be a number")
        now = self._clock.now().timestamp()
        if exp <= now - self._leeway:
            raise InvalidToken("the token has expired")
        if iat > now + self._leeway:
            raise InvalidToken("the token was issued in the future")
        if not_before > now + self._leeway:
            raise InvalidToken("the token is not valid yet (its 'nbf' is in the future)")

    @staticmethod
    def _granted_roles(client: ClientRecord, scope: str | None) -> frozenset[str]:
        if scope is None or not scope.strip():
            return client.roles
        requested = frozenset(scope.split())
        extra = requested - client.roles
        if extra:
            raise InvalidScope(
                f"client {client.client_id!r} does not hold the role(s) {', '.join(sorted(extra))}"
            )
        return requested


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _principal(claims: dict[str, Any]) -> Principal:
    sub, partner, roles, jti = claims["sub"], claims["partner"], claims["roles"], claims["jti"]
    if not isinstance(sub, str) or not isinstance(partner, str):
        raise InvalidToken("the token's 'sub' and 'partner' claims must be strings")
    if not isinstance(roles, list) or not all(isinstance(role, str) for role in roles):
        raise InvalidToken("the token's 'roles' claim must be a list of strings")
    if not isinstance(jti, str):
        raise InvalidToken("the token's 'jti' claim must be a string")
    return Principal(client_id=sub, partner=partner, roles=frozenset(roles), token_id=jti)


def parse_bearer(header_value: str | None) -> str:
    """The token of an `Authorization: Bearer <token>` header value."""
    if header_value is None or not header_value.strip():
        raise InvalidToken("the Authorization header is missing")
    parts = header_value.split()
    if len(parts) != 2 or parts[0].lower() != "bearer":
        raise InvalidToken("the Authorization header must be 'Bearer <token>'")
    return parts[1]


class FailedAttempts:
    """Failed authentication attempts in a sliding window, counted twice: per client id and remote
    address, and per remote address whatever the client id.

    `check` answers how many seconds to wait once `limit` failures of the client id from the address,
    or `address_limit` failures of any client ids from the address, fall inside the last
    `window_seconds`. The second count stops a flood of made-up client ids from one address (each of
    them new to the first count); it counts failures of known clients too, so that being refused never
    tells whether a client id exists, and it is not cleared by a success. In memory and per process;
    thread-safe.
    """

    MAX_KEYS = 10_000

    def __init__(
        self,
        limit: int = 10,
        window_seconds: float = 60,
        *,
        address_limit: int = 30,
        now: Callable[[], float] = time.monotonic,
    ) -> None:
        self.limit = limit
        self.address_limit = address_limit
        self.window = window_seconds
        self._now = now
        self._failures: dict[tuple[str, ...], deque[float]] = {}
        self._lock = threading.Lock()

    def check(self, client_id: str, remote_address: str | None) -> int | None:
        """Seconds to wait before trying again (for `Retry-After`), or None if allowed now."""
        with self._lock:
            return self._longest_wait(self._keys_and_limits(client_id, remote_address), self._now())

    def record_failure(self, client_id: str, remote_address: str | None) -> int | None:
        """Counts a failure, unless the failures counted already reached a limit: then nothing is counted
        and the seconds to wait are returned. The look and the count are one step under the lock, so
        concurrent failures never get more than `limit` (or `address_limit`) answers between them."""
        with self._lock:
            now = self._now()
            keys_and_limits = self._keys_and_limits(client_id, remote_address)
            wait = self._longest_wait(keys_and_limits, now)
            if wait is None:
                for key, limit in keys_and_limits:
                    self._record(key, limit, now)
            return wait

    def clear(self, client_id: str, remote_address: str | None) -> None:
        """Forget the failures of the client id from the address, e.g. after a successful attempt."""
        with self._lock:
            self._failures.pop(_client_key(client_id, remote_address), None)

    def forget_all(self) -> None:
        """Forget every failure, as a limiter new now would (a test's fresh start)."""
        with self._lock:
            self._failures.clear()

    def _keys_and_limits(
        self, client_id: str, remote_address: str | None
    ) -> list[tuple[tuple[str, ...], int]]:
        return [
            (_client_key(client_id, remote_address), self.limit),
            (_address_key(remote_address), self.address_limit),
        ]

    def _longest_wait(self, keys_and_limits: list[tuple[tuple[str, ...], int]], now: float) -> int | None:
        """The longest of the waits the counts impose (under the lock), or None if none is full."""
        waits = [wait for key, limit in keys_and_limits if (wait := self._wait(key, limit, now)) is not None]
        return max(waits) if waits else None

    def _wait(self, key: tuple[str, ...], limit: int, now: float) -> int | None:
        failures = self._recent(key, now)
        if failures is None or len(failures) < limit:
            return None
        oldest_counted = failures[-limit]
        return max(1, math.ceil(oldest_counted + self.window - now))

    def _record(self, key: tuple[str, ...], limit: int, now: float) -> None:
        failures = self._recent(key, now)
        if failures is None:
            if len(self._failures) >= self.MAX_KEYS:
                self._sweep(now)
            failures = self._failures[key] = deque(maxlen=limit)
        failures.append(now)

    def _recent(self, key: tuple[str, ...], now: float) -> deque[float] | None:
        failures = self._failures.get(key)
        if failures is None:
            return None
        while failures and failures[0] <= now - self.window:
            failures.popleft()
        if not failures:
            del self._failures[key]
            return None
        return failures

    def _sweep(self, now: float) -> None:
        for key in list(self._failures):
            self._recent(key, now)
        while len(self._failures) >= self.MAX_KEYS:  # still full: forget the oldest keys
            del self._failures[next(iter(self._failures))]


def _client_key(client_id: str, remote_address: str | None) -> tuple[str, ...]:
    return ("client", client_id, remote_address or "-")


def _address_key(remote_address: str | None) -> tuple[str, ...]:
    return ("address", remote_address or "-")
