"""Per-client rate limits: a token bucket per client, in memory, in each worker process.

A request with a valid bearer token counts against its client (the token's `sub`); a request without one
(POST /connect/token, OPTIONS) against its remote address. A bucket refills at `requests_per_second` and holds
up to `burst` requests; a request that finds less than one in its bucket is refused with 429 `rate_limited`
and `Retry-After` (whole seconds, at least 1), and refused requests take nothing from it. GET /health and the
API document (/schema) and GET /metrics are never limited.

The middleware runs after authentication (a request with a bad token is 401 and costs no token) and before
Idempotency-Key handling and the handler, so a refused request reads no body and touches no database.

Every answer to a counted request (a 200, a 4xx, the 429 too) says where its client stands, in the fields
of the IETF draft "RateLimit header fields for HTTP" (draft-ietf-httpapi-ratelimit-headers, as structured
fields), which `interface.http.observability` adds to whatever answer the request gets:
- `RateLimit-Policy: "default";q=<burst>;w=<window>`: the quota is the bucket's size and the window the
  seconds a drained bucket takes to fill again (burst / rate, rounded up to a whole second). A client that
  sends at most q requests in any w seconds is never refused: over any L seconds a bucket lets
  burst + rate * L through, and such a client sends at most q * ceil(L / w) <= burst + rate * L of them.
- `RateLimit: "default";r=<remaining>;t=<reset>`: r is the whole requests the bucket still holds after this
  one (0 on a 429: the next request now is refused too), t the seconds until it is full again (rounded up).
  `Retry-After` on a 429 is the seconds until it holds one request, so never more than t.
A request refused before it is counted (text that cannot be stored, a missing or bad token) carries neither,
nor do the paths never limited.

The limit holds per worker process: `broker-ledger serve --workers N` (and every replica) keeps buckets of
its own, so a client spreading its connections over every worker may get up to N times the configured rate.
The rate is deliberately not divided by N: the server hands each connection to one worker, and a client on a
single keep-alive connection would then get only 1/N of its rate.
"""

from __future__ import annotations

import math
import threading
import time
from collections import OrderedDict
from collections.abc import Callable

from litestar.enums import ScopeType
from litestar.middleware import ASGIMiddleware
from litestar.types import ASGIApp, Receive, Scope, Send

from interface.http.problems import ApiProblem
from interface.http.settings import RateLimitSettings

EXEMPT_PATHS = ("/health", "/schema", "/metrics")  # prefixes: health checks, the API document, metrics
ROUNDING = 1e-9  # a token due now but short by float rounding still counts
POLICY = b"default"  # the name of the one policy in RateLimit-Policy and RateLimit
POLICY_HEADER = b"ratelimit-policy"
STATE_HEADER = b"ratelimit"
# where a counted request's fields wait in its scope's state, for `interface.http.observability` to add to its
# answer: (name, value) pairs, ready to send
FIELDS = "rate_limit_fields"


class _Bucket:
    __slots__ = ("tokens", "updated")

    def __init__(self, tokens: float, updated: float) -> None:
        self.tokens = tokens
        self.updated = updated


class TokenBuckets:
    """A token bucket per key, thread-safe, on a monotonic clock.

    Memory is bounded: buckets are kept in order of last use, a bucket left alone for `burst / rate` seconds
    is full again (the same as no bucket) and is dropped when a new key arrives, and past `max_keys` the least
    recently used bucket is dropped (its key starts again with a full bucket).
    """

    MAX_KEYS = 100_000

    def __init__(
        self,
        requests_per_second: float,
        burst: int,
        *,
        now: Callable[[], float] = time.monotonic,
        max_keys: int = MAX_KEYS,
    ) -> None:
        if not requests_per_second > 0 or burst < 1 or max_keys < 1:
            raise ValueError("requests_per_second must be positive, burst and max_keys at least 1")
        self.rate = float(requests_per_second)
        self.burst = float(burst)
        self._now = now
        self._max_keys = max_keys
        self._full_after = self.burst / self.rate
        self._buckets: OrderedDict[str, _Bucket] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._buckets)

    def take(self, key: str) -> float:
        """Takes a token from `key`'s bucket: 0.0 if it had one (go on), else the seconds until it will."""
        return self.draw(key)[0]

    def draw(self, key: str) -> tuple[float, float]:
        """Takes a token from `key`'s bucket as `take` does, and tells what the bucket holds after it: (0.0,
        tokens left) if it had one, else (seconds until it will, tokens it holds)."""
        with self._lock:
            now = self._now()
            bucket = self._buckets.get(key)
            if bucket is None:
                self._make_room(now)
                bucket = self._buckets[key] = _Bucket(self.burst, now)
            else:
                self._buckets.move_to_end(key)
                elapsed = max(0.0, now - bucket.updated)
                bucket.tokens = min(self.burst, bucket.tokens + elapsed * self.rate)
                bucket.updated = now
            if bucket.tokens >= 1 - ROUNDING:
                bucket.tokens -= 1
                return 0.0, bucket.tokens
            return (1 - bucket.tokens) / self.rate, bucket.tokens

    def full_after(self, tokens: float) -> int:
        """Whole seconds until a bucket holding `tokens` is full (0 when it is)."""
        return max(0, math.ceil((self.burst - tokens) / self.rate - ROUNDING))

    def _make_room(self, now: float) -> None:
        buckets = self._buckets
        while buckets:
            oldest = next(iter(buckets.values()))
            if now - oldest.updated < self._full_after:
                break
            buckets.popitem(last=False)
        while len(buckets) >= self._max_keys:
            buckets.popitem(last=False)


def retry_after(wait_seconds: float) -> int:
    """`Retry-After` in whole seconds: rounded up, and at least 1."""
    return max(1, math.ceil(wait_seconds))


def client_key(scope: Scope) -> str:
    """The authenticated client, else the remote address (proxies' forwarding headers are not trusted)."""
    user = scope.get("user")
    if user is not None:
        return f"client:{user.client_id}"
    client = scope.get("client")
    return f"address:{client[0] if client else '-'}"


def policy_field(buckets: TokenBuckets) -> bytes:
    """`RateLimit-Policy`'s value: the bucket's size as the quota, the seconds it takes to fill as the
    window."""
    window = max(1, math.ceil(buckets.burst / buckets.rate - ROUNDING))
    return b'"%s";q=%d;w=%d' % (POLICY, int(buckets.burst), window)


class RateLimitMiddleware(ASGIMiddleware):
    """Refuses a request over its client's rate with 429 `rate_limited` and `Retry-After`; leaves the fields
    that tell every request it counts where its client stands in its scope (`FIELDS`)."""

    scopes = (ScopeType.HTTP,)

    def __init__(self, settings: RateLimitSettings) -> None:
        self.settings = settings
        self.buckets = None
        if settings.enabled:
            self.buckets = TokenBuckets(settings.requests_per_second, settings.burst)
            self.policy = (POLICY_HEADER, policy_field(self.buckets))

    async def handle(self, scope: Scope, receive: Receive, send: Send, next_app: ASGIApp) -> None:
        buckets = self.buckets
        if buckets is not None and not scope["path"].startswith(EXEMPT_PATHS):
            key = client_key(scope)
            wait, left = buckets.draw(key)
            state = b'"%s";r=%d;t=%d' % (POLICY, max(0, int(left + ROUNDING)), buckets.full_after(left))
            scope["state"][FIELDS] = (self.policy, (STATE_HEADER, state))
            if wait:
                raise self._refusal(key, retry_after(wait))
        await next_app(scope, receive, send)

    def _refusal(self, key: str, seconds: int) -> ApiProblem:
        who = "this client" if key.startswith("client:") else "this address (without a token)"
        limits = self.settings
        return ApiProblem(
            429,
            "rate_limited",
            f"too many requests: {who} may send {limits.requests_per_second:g} requests per second, in bursts"
            f" of up to {limits.burst}; wait {seconds} s (Retry-After) and spread requests out",
            headers={"Retry-After": str(seconds)},
        )
