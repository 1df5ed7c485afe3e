"""Credentials: secrets kept outside the settings file, in the var directory.

What they are made for comes from the settings (`CredentialSettings`: the API's clients and the partners'
configured callback secrets, `interface.http.settings.ServiceSettings`). On first start every configured
client
without a `secret_hash` gets a random 256-bit secret. Only
its HMAC-SHA-256 under the service's own key (`secret_hash_key`) is kept (`credentials.json`); the
plaintext goes once to `client-secrets.txt` so a developer can use the OAuth2 flow. The same JSON
holds the token signing key (unless the environment gives one, `BROKER_LEDGER_TOKEN_KEY`, handed in as
`token_key`) and a Standard Webhooks secret
per partner (unless the partner's `callback_secret` is set). Later starts reuse what is stored and
only add what is missing. Several worker processes may start at once: they take a file lock, the
first one writes, the others read.

Why HMAC and not argon2, and what happens to argon2 hashes (see `application.secret_hashes`): a
generated secret cannot be guessed, so a slow password hash only let anyone burn 64 MiB and a few
hundred ms of CPU per `POST /connect/token`. The choice made: new records are HMAC (microseconds
to check) and unknown clients are checked against an HMAC dummy. Records stored as argon2 before
are migrated, since the plaintext of a generated secret is still at hand in most cases:
- on start, under the lock: a record whose secret is in `client-secrets.txt` (a client's last line)
  and matches is rewritten as HMAC, once (one argon2 check per such client, ever);
- otherwise (the file was deleted or lacks the client) on the client's first successful login, in
  memory and in `credentials.json`.
Until then, and for a `secret_hash` in the settings (the operator's own, which we never rewrite),
argon2 checks are bounded per process: one at a time, and an attempt that finds no turn within a
short wait is refused (`SecretChecksBusy`).

```
var/                   0700
  credentials.json     0600  {"version": 1, "signing_key": "<base64>", "secret_hash_key": "<base64>",
                              "clients": {"<id>": {"secret_hash": "hmac-sha256$<base64>"}},
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
import logging
import os
import secrets
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from functools import cached_property
from pathlib import Path
from typing import Any, Protocol

from argon2 import PasswordHasher

from application.secret_hashes import SecretHasher, is_hmac_hash

log = logging.getLogger("broker_ledger.credentials")

# The environment's variables for the credentials, read at start by `interface.environment`:
VAR_ENV = "BROKER_LEDGER_VAR"  # the var directory; DEFAULT_VAR when unset
TOKEN_KEY_ENV = "BROKER_LEDGER_TOKEN_KEY"  # the token signing key (base64), used rather than a stored one
DEFAULT_VAR = Path("var")

CREDENTIALS_FILE = "credentials.json"
SECRETS_FILE = "client-secrets.txt"
LOCK_FILE = "credentials.lock"
FORMAT_VERSION = 1
MIN_KEY_BYTES = 32
SECRET_HASH_KEY = "secret_hash_key"  # the HMAC key of client secrets, in credentials.json


class CredentialsError(Exception):
    """The stored credentials or the environment cannot be used; the message says what to fix."""


@dataclass(frozen=True)
class ConfiguredClient:
    """A client as the settings configure it; `secret_hash` only when the operator set one."""

    partner: str
    roles: frozenset[str]
    secret_hash: str | None = None


class CredentialSettings(Protocol):
    """What the credentials are made for: every configured client by its id (unique across partners), and
    each partner's configured callback secret (None where one is to be generated)."""

    def clients(self) -> Mapping[str, ConfiguredClient]: ...

    def callback_secrets(self) -> Mapping[str, str | None]: ...


@dataclass(frozen=True)
class ClientRecord:
    client_id: str
    partner: str
    roles: frozenset[str]
    secret_hash: str


class Credentials:
    """View of the clients, the token signing key and the partners' callback secrets.

    The only change it makes: a client stored with an argon2 hash (`migratable`) gets it rewritten as
    HMAC on its first successful login, here and in the store (`var_dir`, when given).
    """

    def __init__(
        self,
        clients: dict[str, ClientRecord],
        signing_key: bytes,
        callback_secrets: dict[str, str],
        hasher: SecretHasher,
        *,
        var_dir: Path | None = None,
        migratable: frozenset[str] = frozenset(),
    ) -> None:
        self._clients = clients
        self.signing_key = signing_key
        self._callback_secrets = callback_secrets
        self._hasher = hasher
        self._var_dir = var_dir
        self._migratable = migratable

    def client(self, client_id: str) -> ClientRecord | None:
        return self._clients.get(client_id)

    def client_ids(self) -> list[str]:
        return sorted(self._clients)

    def verify_secret(self, client_id: str, secret: str) -> ClientRecord | None:
        """The client if `secret` is its secret, else None.

        An unknown client is checked against a dummy HMAC, so the answer takes as long as for a known
        client stored as HMAC. `SecretChecksBusy` when an argon2 hash cannot be checked now.
        """
        record = self._clients.get(client_id)
        if record is None:
            self._hasher.verify(self._dummy_hash, secret)
            return None
        if not self._hasher.verify(record.secret_hash, secret):
            return None
        if client_id in self._migratable and not is_hmac_hash(record.secret_hash):
            return self._migrate(record, secret)
        return record

    def costly_to_check(self, client_id: str) -> bool:
        """Whether checking a secret of `client_id` runs argon2 (a hash of before not yet rewritten as HMAC);
        False for an unknown client, which is checked against an HMAC dummy."""
        record = self._clients.get(client_id)
        return record is not None and not is_hmac_hash(record.secret_hash)

    def callback_secret(self, partner: str) -> str:
        """The partner's Standard Webhooks secret; KeyError for a partner that is not configured."""
        return self._callback_secrets[partner]

    @cached_property
    def callback_key(self) -> bytes:
        """The key the partners' rotated callback secrets are derived from (`projections.callbacks.secrets`):
        the HMAC of a fixed label under the stored secret-hash key, so the same in every process that shares
        this var directory, and never the key itself."""
        return self._hasher.derived_key(b"broker-ledger callback secrets v1")

    @cached_property
    def _dummy_hash(self) -> str:
        return self._hasher.dummy_hash()

    def _migrate(self, record: ClientRecord, secret: str) -> ClientRecord:
        """`record` with its argon2 hash replaced by the HMAC of `secret`, which it was just checked to be.

        If the store cannot be written, the client stays migrated in this process and is checked with
        argon2 again after a restart.
        """
        migrated = replace(record, secret_hash=self._hasher.hash(secret))
        self._clients[record.client_id] = migrated
        if self._var_dir is None:
            return migrated
        try:
            _store_migrated_hash(self._var_dir, record.client_id, record.secret_hash, migrated.secret_hash)
        except (OSError, CredentialsError) as error:
            log.warning("client %s: its stored secret hash stays argon2: %s", record.client_id, error)
        return migrated


@dataclass(frozen=True)
class TokenKey:
    key: bytes
    source: str  # where it was read: the environment variable's name, or the credentials file's path


def stored_token_key(var_dir: Path, token_key: str | None = None) -> TokenKey:
    """The key the server signs tokens with, read without creating or changing anything (for
    `broker-ledger token`): `token_key` (the environment's `BROKER_LEDGER_TOKEN_KEY`) when given, else the one
    in `var_dir/credentials.json`. `CredentialsError` when there is none: a key made here would be one no
    server has, so its tokens would never verify."""
    if token_key:
        return TokenKey(_decode_key(token_key, TOKEN_KEY_ENV, "the token signing key"), TOKEN_KEY_ENV)
    path = (var_dir / CREDENTIALS_FILE).absolute()
    if not path.is_file():
        raise CredentialsError(
            f"no token signing key: {path} does not exist. Run this where `broker-ledger serve` runs"
            f" (it keeps its key in ./var), or set {VAR_ENV} to the server's var directory"
            f" (or {TOKEN_KEY_ENV} to its key)"
        )
    stored = _read_store(path)
    if not stored.get("signing_key"):
        raise CredentialsError(f"{path}: has no signing_key (the server signs with {TOKEN_KEY_ENV})")
    return TokenKey(_decode_key(stored["signing_key"], str(path), "the token signing key"), str(path))


def load_or_create_credentials(
    settings: CredentialSettings,
    var_dir: Path,
    *,
    token_key: str | None = None,
    argon2: PasswordHasher | None = None,
) -> Credentials:
    """Load the stored credentials, generating and storing whatever is missing for `settings`.

    `token_key` is the environment's signing key (`BROKER_LEDGER_TOKEN_KEY`): when given, tokens are signed
    with it and none is generated or stored. `argon2` checks the argon2 hashes still accepted (tests give
    cheaper parameters); production uses the library's defaults.
    """
    clients, configured_secrets = settings.clients(), settings.callback_secrets()
    var_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    with _locked(var_dir / LOCK_FILE):
        stored = _read_store(var_dir / CREDENTIALS_FILE)
        changed = _complete_keys(stored, token_key)
        hasher = SecretHasher(_secret_hash_key(stored), argon2 or PasswordHasher())
        migrated = _migrate_known_secrets(stored, var_dir / SECRETS_FILE, hasher)
        new_secrets, completed = _complete(stored, clients, configured_secrets, hasher)
        changed = changed or migrated or completed
        if changed:
            # Plaintext first: if we stop between the two writes, the next start makes new secrets
            # and appends them (a client's last line counts) rather than keep unusable hashes.
            if new_secrets:
                _append_secrets(var_dir / SECRETS_FILE, new_secrets)
            _write_atomically(var_dir / CREDENTIALS_FILE, stored)
    return Credentials(
        clients=_records(clients, stored),
        signing_key=_signing_key(stored, token_key),
        callback_secrets={
            code: secret or stored["callback_secrets"][code] for code, secret in configured_secrets.items()
        },
        hasher=hasher,
        var_dir=var_dir,
        # the clients whose secret hash is in credentials.json rather than in the settings
        migratable=frozenset(
            client_id for client_id, client in clients.items() if client.secret_hash is None
        ),
    )


def _complete_keys(stored: dict[str, Any], token_key: str | None) -> bool:
    """Add the keys missing from `stored`, in place (no signing key when `token_key` is given); whether it
    changed."""
    changed = False
    if not stored.get(SECRET_HASH_KEY):
        stored[SECRET_HASH_KEY] = base64.b64encode(secrets.token_bytes(MIN_KEY_BYTES)).decode()
        changed = True
    if not token_key and not stored.get("signing_key"):
        stored["signing_key"] = base64.b64encode(secrets.token_bytes(MIN_KEY_BYTES)).decode()
        changed = True
    return changed


def _migrate_known_secrets(stored: dict[str, Any], secrets_file: Path, hasher: SecretHasher) -> bool:
    """Rewrite as HMAC, in place, every stored argon2 hash whose secret `secrets_file` holds; whether any."""
    legacy = {
        client_id: entry["secret_hash"]
        for client_id, entry in stored["clients"].items()
        if not is_hmac_hash(entry["secret_hash"])
    }
    known = _read_secrets(secrets_file) if legacy else {}
    changed = False
    for client_id, secret_hash in legacy.items():
        secret = known.get(client_id)
        if secret is not None and hasher.verify(secret_hash, secret):
            stored["clients"][client_id]["secret_hash"] = hasher.hash(secret)
            changed = True
    return changed


def _read_secrets(path: Path) -> dict[str, str]:
    """The generated secrets, `client_id=secret` per line (a client's last line counts); {} if unreadable."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError:
        return {}
    return dict(line.split("=", 1) for line in lines if "=" in line)


def _complete(
    stored: dict[str, Any],
    clients: Mapping[str, ConfiguredClient],
    configured_secrets: Mapping[str, str | None],
    hasher: SecretHasher,
) -> tuple[list[tuple[str, str]], bool]:
    """Add the missing client secrets and callback secrets to `stored`, in place.

    Returns the new plaintext secrets and whether `stored` changed.
    """
    new_secrets: list[tuple[str, str]] = []
    changed = False
    stored_clients = stored["clients"]
    for client_id, client in clients.items():
        if client.secret_hash is None and client_id not in stored_clients:
            secret = secrets.token_urlsafe(32)
            stored_clients[client_id] = {"secret_hash": hasher.hash(secret)}
            new_secrets.append((client_id, secret))
            changed = True
    callback_secrets = stored["callback_secrets"]
    for code, secret in configured_secrets.items():
        if secret is None and code not in callback_secrets:
            callback_secrets[code] = "whsec_" + base64.b64encode(secrets.token_bytes(24)).decode()
            changed = True
    return new_secrets, changed


def _records(clients: Mapping[str, ConfiguredClient], stored: dict[str, Any]) -> dict[str, ClientRecord]:
    return {
        client_id: ClientRecord(
            client_id=client_id,
            partner=client.partner,
            roles=client.roles,
            secret_hash=client.secret_hash or stored["clients"][client_id]["secret_hash"],
        )
        for client_id, client in clients.items()
    }


def _signing_key(stored: dict[str, Any], token_key: str | None) -> bytes:
    source = TOKEN_KEY_ENV if token_key else CREDENTIALS_FILE
    return _decode_key(token_key or stored["signing_key"], source, "the token signing key")


def _secret_hash_key(stored: dict[str, Any]) -> bytes:
    return _decode_key(stored[SECRET_HASH_KEY], CREDENTIALS_FILE, f"the {SECRET_HASH_KEY}")


def _decode_key(encoded: str, source: str, what: str) -> bytes:
    standard = encoded.strip().replace("-", "+").replace("_", "/")  # accept url-safe base64 too
    try:
        key = base64.b64decode(standard + "=" * (-len(standard) % 4), validate=True)
    except (binascii.Error, ValueError):
        raise CredentialsError(f"{source}: {what} is not valid base64") from None
    if len(key) < MIN_KEY_BYTES:
        raise CredentialsError(f"{source}: {what} must be base64 of at least {MIN_KEY_BYTES} bytes")
    return key


def _store_migrated_hash(var_dir: Path, client_id: str, old_hash: str, new_hash: str) -> None:
    """Replace the stored `old_hash` of `client_id` by `new_hash`, unless another process already has."""
    with _locked(var_dir / LOCK_FILE):
        stored = _read_store(var_dir / CREDENTIALS_FILE)
        entry = stored["clients"].get(client_id)
        if entry is None or entry.get("secret_hash") != old_hash:
            return
        entry["secret_hash"] = new_hash
        _write_atomically(var_dir / CREDENTIALS_FILE, stored)


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
