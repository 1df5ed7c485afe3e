"""How client secrets are stored and checked: HMAC-SHA-256 under a server key, argon2 only for old hashes.

The secrets the service generates are 256-bit random values (`secrets.token_urlsafe(32)`): nobody can guess
one, with or without a slow hash in the way, so a password hash buys nothing for them. It only costs: argon2
with the library's defaults takes 64 MiB and 120-260 ms of CPU per check, and `POST /connect/token` runs a
check for anyone who asks, so a flood of bad token requests used to starve the service. A generated secret
is therefore stored as `hmac-sha256$<base64 of HMAC-SHA-256(server key, secret)>`; checking one costs a few
microseconds and compares digests with `hmac.compare_digest`.

Argon2 hashes (`$argon2id$...`) are still accepted: a `secret_hash` written in the settings by an
operator, and records stored before this format existed until credentials.py has rewritten them as HMAC
(on start when `client-secrets.txt` still holds the secret, else on the first successful login). Their
checks are bounded: at most `LEGACY_CHECKS_AT_ONCE` runs at a time in a process (one: a check takes
64 MiB and most of a core), and an attempt that finds no turn within `LEGACY_WAIT_SECONDS` is refused with
`SecretChecksBusy` (429 at the HTTP edge) rather than queue up.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import threading

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError

HMAC_PREFIX = "hmac-sha256$"
LEGACY_CHECKS_AT_ONCE = 1
LEGACY_WAIT_SECONDS = 0.05
BUSY_RETRY_AFTER_SECONDS = 1


class SecretChecksBusy(Exception):
    """Every turn for an argon2 check is taken in this process; the caller may try again shortly."""

    retry_after = BUSY_RETRY_AFTER_SECONDS


def is_hmac_hash(secret_hash: str) -> bool:
    return secret_hash.startswith(HMAC_PREFIX)


class SecretHasher:
    """Makes and checks stored forms of client secrets (thread-safe)."""

    def __init__(
        self,
        key: bytes,
        argon2: PasswordHasher | None = None,
        *,
        legacy_checks_at_once: int = LEGACY_CHECKS_AT_ONCE,
        legacy_wait_seconds: float = LEGACY_WAIT_SECONDS,
    ) -> None:
        self._key = key
        self._argon2 = argon2 or PasswordHasher()
        self._legacy_turns = threading.BoundedSemaphore(legacy_checks_at_once)
        self._legacy_wait = legacy_wait_seconds

    def hash(self, secret: str) -> str:
        """The stored form of `secret`: `hmac-sha256$` and the base64 of its HMAC under the server key."""
        return HMAC_PREFIX + base64.b64encode(self._digest(secret)).decode()

    def derived_key(self, label: bytes) -> bytes:
        """A key of its own for another use, named by `label`: HMAC-SHA-256 of it under the server key."""
        return hmac.new(self._key, label, hashlib.sha256).digest()

    def dummy_hash(self) -> str:
        """A stored form no secret will match, to check unknown clients against."""
        return self.hash(secrets.token_urlsafe(32))

    def verify(self, secret_hash: str, secret: str) -> bool:
        """Whether `secret` is the one `secret_hash` was made of.

        `SecretChecksBusy` if `secret_hash` is an argon2 hash and no turn for checking it came in time.
        """
        if is_hmac_hash(secret_hash):
            return self._verify_hmac(secret_hash, secret)
        return self._verify_argon2(secret_hash, secret)

    def _digest(self, secret: str) -> bytes:
        return hmac.new(self._key, secret.encode("utf-8", "surrogatepass"), hashlib.sha256).digest()

    def _verify_hmac(self, secret_hash: str, secret: str) -> bool:
        try:
            stored = base64.b64decode(secret_hash.removeprefix(HMAC_PREFIX), validate=True)
        except ValueError:
            stored = b""
        return hmac.compare_digest(stored, self._digest(secret))

    def _verify_argon2(self, secret_hash: str, secret: str) -> bool:
        if not self._legacy_turns.acquire(timeout=self._legacy_wait):
            raise SecretChecksBusy
        try:
            return self._argon2.verify(secret_hash, secret)
        except (VerificationError, InvalidHashError):
            return False
        finally:
            self._legacy_turns.release()
