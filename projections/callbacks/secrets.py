"""The partners' callback signing secrets, rotated through the API and read by every delivery worker.

Before a partner's first rotation its callbacks are signed with its configured secret (the settings'
`callback_secret`, else the one generated into `var/credentials.json`), which each process reads at start.
A rotation must reach every process that sends callbacks (each API worker runs a delivery worker, and
another host may too), so what a rotation decides lives in PostgreSQL, in `callback_secrets` (one row per
partner that ever rotated), which the claim of each delivery reads (`outbox.CLAIM`): a rotation is in force
for the very next attempt, in every process, with no restart and no cache to expire.

No secret is stored there: a rotated secret is derived, by HMAC-SHA-256 under the service's callback key
(`key`, handed in by the composition root: `application.credentials.Credentials.callback_key`, derived
from the key of `var/credentials.json` that every process of the service shares), from the partner and a
random salt that the row keeps. Reading the table (an analyst, a backup) gives no secret; the rotation's
answer is the one place the new secret is shown. The row keeps:

- `current_salt`: the salt of the secret that signs now, since `rotated_at`;
- `previous_salt`, `previous_until`: the secret it replaced, which signs too until `previous_until` (the
  overlap, `DeliveryConfig.signing_overlap_seconds`, 24 h by default) or until it is retired
  (`DELETE /callbacks/secret/previous`); `''` names the configured secret (the first rotation's previous).

During the overlap every callback carries both signatures, the new secret's first, in the one
`webhook-signature` header (Standard Webhooks: space-separated `v1,<signature>` entries), so a receiver
verifies with whichever secret it has. A second rotation within an overlap makes the secret it replaces the
previous one: the oldest stops signing at once (two secrets at most).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from psycopg.rows import dict_row
from psycopg.sql import SQL, Identifier
from psycopg_pool import ConnectionPool

SECRETS = "callback_secrets"
CONFIGURED = ""  # a previous salt that names the partner's configured secret

CREATE = """CREATE TABLE IF NOT EXISTS {secrets} (
    partner text PRIMARY KEY,
    current_salt text NOT NULL,
    rotated_at timestamptz NOT NULL,
    previous_salt text,
    previous_until timestamptz)"""
# the partner's secrets as a claim reads them (`outbox.CLAIM`): the previous one only while it signs
CURRENT_SALT = "(SELECT s.current_salt FROM {secrets} AS s WHERE s.partner = o.partner)"
PREVIOUS_SALT = (
    "(SELECT s.previous_salt FROM {secrets} AS s WHERE s.partner = o.partner AND s.previous_until > now())"
)
ROTATE = """INSERT INTO {secrets} AS s (partner, current_salt, rotated_at, previous_salt, previous_until)
VALUES (%(partner)s, %(salt)s, now(), %(configured)s, now() + make_interval(secs => %(overlap)s))
ON CONFLICT (partner) DO UPDATE SET current_salt = excluded.current_salt, rotated_at = excluded.rotated_at,
    previous_salt = s.current_salt, previous_until = excluded.previous_until
RETURNING rotated_at, previous_until"""
RETIRE = """UPDATE {secrets} SET previous_salt = NULL, previous_until = NULL WHERE partner = %(partner)s
RETURNING rotated_at, previous_until"""
STATE = """SELECT rotated_at, CASE WHEN previous_until > now() THEN previous_until END AS previous_until
FROM {secrets} WHERE partner = %(partner)s"""


@dataclass(frozen=True)
class SigningSalts:
    """What a claimed delivery read of its partner's rotations: no current salt before the first one."""

    current: str | None = None
    previous: str | None = None  # while the previous secret still signs; CONFIGURED for the configured one


NO_ROTATION = SigningSalts()  # a partner that never rotated


@dataclass(frozen=True)
class SecretState:
    """A partner's rotation as the API shows it (never a secret)."""

    rotated_at: datetime | None  # None: never rotated, the configured secret signs
    previous_until: datetime | None  # when the previous secret stops signing; None: it signs no more


@dataclass(frozen=True)
class Rotated:
    secret: str  # shown once, in the rotation's answer
    state: SecretState


def derived_secret(key: bytes, partner: str, salt: str) -> str:
    """The Standard Webhooks secret (`whsec_` and the base64 of 32 bytes) of `partner` and `salt`."""
    digest = hmac.new(key, f"callback-secret/v1\x00{partner}\x00{salt}".encode(), hashlib.sha256).digest()
    return "whsec_" + base64.b64encode(digest).decode()


class SigningSecrets:
    """The secrets that sign a partner's callback: `configured` gives a partner's configured secret (KeyError
    for an unknown partner), `key` derives the rotated ones (none: no rotation can be in force)."""

    def __init__(self, configured: Callable[[str], str], key: bytes | None = None) -> None:
        self.configured = configured
        self.key = key

    def signing(self, partner: str, salts: SigningSalts) -> list[str]:
        """The secrets that sign now, the current one first."""
        if salts.current is None or self.key is None:
            return [self.configured(partner)]
        current = derived_secret(self.key, partner, salts.current)
        if salts.previous is None:
            return [current]
        if salts.previous == CONFIGURED:
            return [current, self.configured(partner)]
        return [current, derived_secret(self.key, partner, salts.previous)]


class SecretRotations:
    """Rotating and retiring the partners' secrets (the rows of `callback_secrets`)."""

    def __init__(self, pool: ConnectionPool, schema: str, key: bytes, overlap_seconds: float) -> None:
        self.pool = pool
        self.table = Identifier(schema, SECRETS)
        self.key = key
        self.overlap_seconds = overlap_seconds

    def _run(self, statement: str, params: dict[str, Any]) -> dict[str, Any] | None:
        with self.pool.connection() as conn, conn.cursor(row_factory=dict_row) as curs:
            return curs.execute(SQL(statement).format(secrets=self.table), params).fetchone()  # type: ignore[arg-type]

    def rotate(self, partner: str) -> Rotated:
        """A new secret signs from now on; the one it replaces signs too until the overlap's end."""
        salt = secrets.token_hex(16)
        params = {"partner": partner, "salt": salt, "configured": CONFIGURED, "overlap": self.overlap_seconds}
        row = self._run(ROTATE, params)
        assert row is not None  # an upsert returns its row
        return Rotated(derived_secret(self.key, partner, salt), SecretState(**row))

    def retire_previous(self, partner: str) -> SecretState:
        """The previous secret stops signing now (nothing changes when none signs)."""
        row = self._run(RETIRE, {"partner": partner})
        return SecretState(**row) if row else SecretState(None, None)

    def state(self, partner: str) -> SecretState:
        row = self._run(STATE, {"partner": partner})
        return SecretState(**row) if row else SecretState(None, None)
