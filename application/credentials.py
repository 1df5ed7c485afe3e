"""Credentials: secrets kept outside the settings file, in the var directory.

On first start every configured client without a `secret_hash` gets a random secret. Only its
argon2 hash is kept (`credentials.json`); the plaintext goes once to `client-secrets.txt` so a
developer can use the OAuth2 flow. The same JSON holds the token signing key (unless
`BROKER_LEDGER_TOKEN_KEY` is set) and a Standard Webhooks secret per partner (unless the partner's
`callback_secret` is set). Later starts reuse what is stored and only add what is missing. Several
worker processes may start at once: they take a file lock, the first one writes, the others read.

```
var/                   0700
  credentials.json     0600  {"version": 1, "signing_key": "<base64>",
                              "clients": {"<id>": {"secret_hash": "$argon2id$..."}},
                              "callback_secrets": {"<partner>": "whsec_..."}}
  client-secrets.txt   0600  client_id=secret per generated secret; appended, never rewritten
  credentials.lock     0600  lock file for fcntl.flock
```
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import fcntl
import json
import os
import secrets
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError

from application.settings import Settings

VAR_ENV = "BROKER_LEDGER_VAR"
TOKEN_KEY_ENV = "BROKER_LEDGER_TOKEN_KEY"
DEFAULT_VAR = Path("var")

CREDENTIALS_FILE = "credentials.json"
SECRETS_FILE = "client-secrets.txt"
LOCK_FILE = "credentials.lock"
FORMAT_VERSION = 1
MIN_KEY_BYTES = 32


class CredentialsError(Exception):
    """The stored credentials or the environment cannot be used; the message says what to fix."""


@dataclass(frozen=True)
class ClientRecord:
    client_id: str
    partner: str
    roles: frozenset[str]
    secret_hash: str


def var_dir() -> Path:
    """The directory for generated secrets: `$BROKER_LEDGER_VAR`, or `./var`."""
    return Path(os.environ.get(VAR_ENV) or DEFAULT_VAR)


class Credentials:
    """Read-only view of the clients, the token signing key and the partners' callback secrets."""

    def __init__(
        self,
        clients: dict[str, ClientRecord],
        signing_key: bytes,
        callback_secrets: dict[str, str],
        hasher: PasswordHasher | None = None,
    ) -> None:
        self._clients = clients
        self.signing_key = signing_key
        self._callback_secrets = callback_secrets
        self._hasher = hasher or PasswordHasher()

    def client(self, client_id: str) -> ClientRecord | None:
        return self._clients.get(client_id)

    def client_ids(self) -> list[str]:
        return sorted(self._clients)

    def verify_secret(self, client_id: str, secret: str) -> ClientRecord | None:
        """The client if `secret` is its secret, else None.

        An unknown client is checked against a dummy hash, so the answer takes as long as for a
        known one.
        """
        record = self._clients.get(client_id)
        secret_hash = record.secret_hash if record is not None else self._dummy_hash
        try:
            self._hasher.verify(secret_hash, secret)
        except (VerificationError, InvalidHashError):
            return None
        return record

    def callback_secret(self, partner: str) -> str:
        """The partner's Standard Webhooks secret; KeyError for a partner that is not configured."""
        return self._callback_secrets[partner]

    @cached_property
    def _dummy_hash(self) -> str:
        return self._hasher.hash(secrets.token_urlsafe(32))


def load_or_create_credentials(
    settings: Settings, var_dir: Path, *, hasher: PasswordHasher | None = None
) -> Credentials:
    """Load the stored credentials, generating and storing whatever is missing for `settings`.

    `hasher` is for tests that want cheaper argon2 parameters; production uses the library's
    defaults.
    """
    hasher = hasher or PasswordHasher()
    owners = _client_owners(settings)
    var_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    with _locked(var_dir / LOCK_FILE):
        stored = _read_store(var_dir / CREDENTIALS_FILE)
        new_secrets, changed = _complete(stored, settings, hasher)
        if changed:
            # Plaintext first: if we stop between the two writes, the next start makes new secrets
            # and appends them (a client's last line counts) rather than keep unusable hashes.
            if new_secrets:
                _append_secrets(var_dir / SECRETS_FILE, new_secrets)
            _write_atomically(var_dir / CREDENTIALS_FILE, stored)
    return Credentials(
        clients=_records(settings, owners, stored),
        signing_key=_signing_key(stored),
        callback_secrets={
            code: partner.callback_secret or stored["callback_secrets"][code]
            for code, partner in settings.partners.items()
        },
        hasher=hasher,
    )


def _client_owners(settings: Settings) -> dict[str, str]:
    owners: dict[str, str] = {}
    for code, partner in settings.partners.items():
        for client_id in partner.clients:
            if client_id in owners:
                raise CredentialsError(
                    f"client id {client_id!r} is configured for partners {owners[client_id]!r}"
                    f" and {code!r}; client ids must be unique"
                )
            owners[client_id] = code
    return owners


def _complete(
    stored: dict[str, Any], settings: Settings, hasher: PasswordHasher
) -> tuple[list[tuple[str, str]], bool]:
    """Add what is missing to `stored`, in place.

    Returns the new plaintext secrets and whether `stored` changed.
    """
    new_secrets: list[tuple[str, str]] = []
    changed = False
    clients = stored["clients"]
    for partner in settings.partners.values():
        for client_id, client in partner.clients.items():
            if client.secret_hash is None and client_id not in clients:
                secret = secrets.token_urlsafe(32)
                clients[client_id] = {"secret_hash": hasher.hash(secret)}
                new_secrets.append((client_id, secret))
                changed = True
    callback_secrets = stored["callback_secrets"]
    for code, partner in settings.partners.items():
        if partner.callback_secret is None and code not in callback_secrets:
            callback_secrets[code] = "whsec_" + base64.b64encode(secrets.token_bytes(24)).decode()
            changed = True
    if not os.environ.get(TOKEN_KEY_ENV) and not stored.get("signing_key"):
        stored["signing_key"] = base64.b64encode(secrets.token_bytes(MIN_KEY_BYTES)).decode()
        changed = True
    return new_secrets, changed


def _records(settings: Settings, owners: dict[str, str], stored: dict[str, Any]) -> dict[str, ClientRecord]:
    records = {}
    for client_id, partner_code in owners.items():
        client = settings.partners[partner_code].clients[client_id]
        records[client_id] = ClientRecord(
            client_id=client_id,
            partner=partner_code,
            roles=frozenset(role.value for role in client.roles),
            secret_hash=client.secret_hash or stored["clients"][client_id]["secret_hash"],
        )
    return records


def _signing_key(stored: dict[str, Any]) -> bytes:
    from_env = os.environ.get(TOKEN_KEY_ENV)
    source = TOKEN_KEY_ENV if from_env else CREDENTIALS_FILE
    encoded = from_env or stored["signing_key"]
    standard = encoded.strip().replace("-", "+").replace("_", "/")  # accept url-safe base64 too
    try:
        key = base64.b64decode(standard + "=" * (-len(standard) % 4), validate=True)
    except (binascii.Error, ValueError):
        raise CredentialsError(f"{source}: the token signing key is not valid base64") from None
    if len(key) < MIN_KEY_BYTES:
        raise CredentialsError(
            f"{source}: the token signing key must be base64 of at least {MIN_KEY_BYTES} bytes"
        )
    return key


def _read_store(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {"version": FORMAT_VERSION, "clients": {}, "callback_secrets": {}}
    except (OSError, ValueError) as error:
        raise CredentialsError(f"{path}: cannot read the stored credentials: {error}") from None
    if not isinstance(data, dict) or data.get("version") != FORMAT_VERSION:
        raise CredentialsError(f"{path}: not a credentials file of version {FORMAT_VERSION}")
    data.setdefault("clients", {})
    data.setdefault("callback_secrets", {})
    return data


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock


def _write_atomically(path: Path, data: dict[str, Any]) -> None:
    fd, temp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")  # mode 0600
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as file:
            json.dump(data, file, indent=2, sort_keys=True)
            file.write("\n")
            file.flush()
            os.fsync(file.fileno())
        os.replace(temp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp)
        raise


def _append_secrets(path: Path, new_secrets: list[tuple[str, str]]) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    with os.fdopen(fd, "a", encoding="utf-8") as file:
        os.fchmod(file.fileno(), 0o600)
        file.writelines(f"{client_id}={secret}\n" for client_id, secret in new_secrets)
        file.flush()
        os.fsync(file.fileno())
