"""Credentials kept in the var directory: generated once, reused, readable only by their owner; generated
secrets stored as HMAC and checked without argon2, argon2 hashes of before still accepted and migrated."""

from __future__ import annotations

import base64
import json
import multiprocessing
import stat
from pathlib import Path

import msgspec
import pytest
from argon2 import PasswordHasher
from argon2.exceptions import VerifyMismatchError

from application.credentials import (
    CREDENTIALS_FILE,
    SECRET_HASH_KEY,
    SECRETS_FILE,
    TOKEN_KEY_ENV,
    VAR_ENV,
    Credentials,
    CredentialsError,
    load_or_create_credentials,
)
from application.settings import DEFAULT_SETTINGS, Partner
from interface.environment import Environment
from interface.http.settings import ApiPartner, Client, Role, ServiceSettings, load_service_settings

DEMO_CLIENTS = {"demo-broker", "demo-operator", "demo-auditor", "other-broker", "other-operator"}


def fast_hasher() -> PasswordHasher:
    return PasswordHasher(time_cost=1, memory_cost=8, parallelism=1)


@pytest.fixture(autouse=True)
def no_token_key_in_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(TOKEN_KEY_ENV, raising=False)


@pytest.fixture
def settings() -> ServiceSettings:
    return load_service_settings(DEFAULT_SETTINGS)


def start(settings: ServiceSettings, var: Path, token_key: str | None = None) -> Credentials:
    return load_or_create_credentials(settings, var, token_key=token_key, argon2=fast_hasher())


def secrets_in(var: Path) -> dict[str, str]:
    lines = (var / SECRETS_FILE).read_text().splitlines()
    return dict(line.split("=", 1) for line in lines)


def with_partner(
    settings: ServiceSettings,
    code: str,
    clients: dict[str, Client] | None = None,
    callback_secret: str | None = None,
) -> ServiceSettings:
    """`settings` with another partner: callback secret in the ledger's part, clients in the API's."""
    partner = Partner(callback_secret=callback_secret)
    api_partner = ApiPartner(clients=clients or {})
    return ServiceSettings(
        msgspec.structs.replace(settings.ledger, partners={**settings.ledger.partners, code: partner}),
        msgspec.structs.replace(settings.api, partners={**settings.api.partners, code: api_partner}),
    )


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_first_start_generates_a_secret_for_each_client(settings: ServiceSettings, tmp_path: Path) -> None:
    credentials = start(settings, tmp_path)

    secrets = secrets_in(tmp_path)
    assert set(secrets) == DEMO_CLIENTS
    for client_id, secret in secrets.items():
        assert credentials.verify_secret(client_id, secret) == credentials.client(client_id)
    stored = json.loads((tmp_path / CREDENTIALS_FILE).read_text())
    assert set(stored["clients"]) == DEMO_CLIENTS
    assert all(entry["secret_hash"].startswith("hmac-sha256$") for entry in stored["clients"].values())
    assert not any(secret in (tmp_path / CREDENTIALS_FILE).read_text() for secret in secrets.values())


def test_generated_files_are_readable_by_their_owner_only(settings: ServiceSettings, tmp_path: Path) -> None:
    start(settings, tmp_path / "var")

    assert mode(tmp_path / "var" / CREDENTIALS_FILE) == 0o600
    assert mode(tmp_path / "var" / SECRETS_FILE) == 0o600
    assert mode(tmp_path / "var") == 0o700


def test_second_start_reuses_the_stored_credentials(settings: ServiceSettings, tmp_path: Path) -> None:
    first = start(settings, tmp_path)
    secrets_before = (tmp_path / SECRETS_FILE).stat()
    json_before = (tmp_path / CREDENTIALS_FILE).read_text()

    second = start(settings, tmp_path)

    assert second.signing_key == first.signing_key
    for client_id in DEMO_CLIENTS:
        assert second.client(client_id) == first.client(client_id)
    assert second.callback_secret("demo") == first.callback_secret("demo")
    assert (tmp_path / CREDENTIALS_FILE).read_text() == json_before
    secrets_after = (tmp_path / SECRETS_FILE).stat()
    assert (secrets_after.st_mtime_ns, secrets_after.st_size) == (
        secrets_before.st_mtime_ns,
        secrets_before.st_size,
    )


def test_a_client_added_later_gets_its_secret_appended(settings: ServiceSettings, tmp_path: Path) -> None:
    first = start(settings, tmp_path)
    old_lines = (tmp_path / SECRETS_FILE).read_text()
    later = with_partner(settings, "late", {"late-broker": Client(roles=[Role.BROKER])})

    second = start(later, tmp_path)

    text = (tmp_path / SECRETS_FILE).read_text()
    assert text.startswith(old_lines)
    assert text[len(old_lines) :].startswith("late-broker=")
    assert second.verify_secret("late-broker", secrets_in(tmp_path)["late-broker"]) is not None
    assert second.client("demo-broker") == first.client("demo-broker")
    assert second.callback_secret("late").startswith("whsec_")


def test_verify_secret_accepts_the_right_secret_only(settings: ServiceSettings, tmp_path: Path) -> None:
    credentials = start(settings, tmp_path)
    secret = secrets_in(tmp_path)["demo-operator"]

    record = credentials.verify_secret("demo-operator", secret)

    assert record is not None
    assert (record.client_id, record.partner, record.roles) == (
        "demo-operator",
        "demo",
        frozenset({"operator"}),
    )
    assert credentials.verify_secret("demo-operator", secret + "x") is None
    assert credentials.verify_secret("demo-broker", secret) is None
    assert credentials.verify_secret("nobody", secret) is None
    assert credentials.client("nobody") is None


def test_a_configured_secret_hash_is_used_and_nothing_generated_for_it(
    settings: ServiceSettings, tmp_path: Path
) -> None:
    configured = fast_hasher().hash("configured-secret")
    custom = with_partner(
        settings,
        "own",
        {"own-client": Client(roles=[Role.AUDITOR], secret_hash=configured)},
    )

    credentials = start(custom, tmp_path)

    assert "own-client" not in secrets_in(tmp_path)
    assert credentials.client("own-client").secret_hash == configured
    assert credentials.verify_secret("own-client", "configured-secret") is not None


def test_signing_key_is_generated_once_as_32_random_bytes(settings: ServiceSettings, tmp_path: Path) -> None:
    credentials = start(settings, tmp_path)

    stored = json.loads((tmp_path / CREDENTIALS_FILE).read_text())
    assert len(credentials.signing_key) == 32
    assert base64.b64decode(stored["signing_key"]) == credentials.signing_key
    assert start(settings, tmp_path).signing_key == credentials.signing_key


def test_signing_key_from_the_environment_wins_and_is_not_stored(
    settings: ServiceSettings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = bytes(range(40))
    monkeypatch.setenv(TOKEN_KEY_ENV, base64.urlsafe_b64encode(key).decode().rstrip("="))

    credentials = start(settings, tmp_path, Environment.read().token_key)

    assert credentials.signing_key == key
    assert "signing_key" not in json.loads((tmp_path / CREDENTIALS_FILE).read_text())


@pytest.mark.parametrize("value", ["not base64!", base64.b64encode(b"short").decode()])
def test_an_unusable_signing_key_in_the_environment_is_refused(
    settings: ServiceSettings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv(TOKEN_KEY_ENV, value)

    with pytest.raises(CredentialsError, match=TOKEN_KEY_ENV):
        start(settings, tmp_path, Environment.read().token_key)


def test_each_partner_gets_a_standard_webhooks_secret(settings: ServiceSettings, tmp_path: Path) -> None:
    configured = with_partner(settings, "own", callback_secret="whsec_configured")

    credentials = start(configured, tmp_path)

    for partner in ("demo", "other"):
        secret = credentials.callback_secret(partner)
        assert secret.startswith("whsec_")
        assert len(base64.b64decode(secret.removeprefix("whsec_"), validate=True)) == 24
    assert credentials.callback_secret("demo") != credentials.callback_secret("other")
    assert credentials.callback_secret("own") == "whsec_configured"
    assert "own" not in json.loads((tmp_path / CREDENTIALS_FILE).read_text())["callback_secrets"]


def test_a_credentials_file_of_another_format_is_refused(settings: ServiceSettings, tmp_path: Path) -> None:
    (tmp_path / CREDENTIALS_FILE).write_text('{"version": 99}')

    with pytest.raises(CredentialsError, match="version"):
        start(settings, tmp_path)


def test_var_dir_defaults_to_var_and_follows_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(VAR_ENV, raising=False)
    assert Environment.read().var_dir == Path("var")
    monkeypatch.setenv(VAR_ENV, str(tmp_path))
    assert Environment.read().var_dir == tmp_path


def _start_in_child(var: str) -> tuple[bytes, dict[str, str], str]:
    credentials = load_or_create_credentials(
        load_service_settings(DEFAULT_SETTINGS), Path(var), argon2=fast_hasher()
    )
    hashes = {client_id: credentials.client(client_id).secret_hash for client_id in DEMO_CLIENTS}
    return credentials.signing_key, hashes, credentials.callback_secret("demo")


def test_workers_starting_at_once_agree_on_one_set(tmp_path: Path) -> None:
    with multiprocessing.get_context("fork").Pool(6) as pool:
        results = pool.map(_start_in_child, [str(tmp_path)] * 6)

    assert all(result == results[0] for result in results)
    assert set(secrets_in(tmp_path)) == DEMO_CLIENTS
    assert len((tmp_path / SECRETS_FILE).read_text().splitlines()) == len(DEMO_CLIENTS)


# --- how secrets are stored and checked -----------------------------------------------------------------


@pytest.fixture
def no_argon2(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Records every argon2 check (answered as a mismatch): the list of the hashes checked."""
    checked: list[str] = []

    def record(self: PasswordHasher, secret_hash: str, secret: str) -> bool:
        checked.append(secret_hash)
        raise VerifyMismatchError

    monkeypatch.setattr(PasswordHasher, "verify", record)
    return checked


def store_argon2_hash(var: Path, client_id: str, secret: str) -> str:
    """Rewrites the client's stored record as it was before HMAC: an argon2 hash of `secret`."""
    stored = json.loads((var / CREDENTIALS_FILE).read_text())
    legacy = fast_hasher().hash(secret)
    stored["clients"][client_id]["secret_hash"] = legacy
    (var / CREDENTIALS_FILE).write_text(json.dumps(stored))
    return legacy


def forget_plaintext(var: Path) -> None:
    """Deletes client-secrets.txt, as an operator may once the secrets are handed out."""
    (var / SECRETS_FILE).unlink()


def stored_hash(var: Path, client_id: str) -> str:
    return json.loads((var / CREDENTIALS_FILE).read_text())["clients"][client_id]["secret_hash"]


def test_generated_secrets_are_checked_without_argon2(
    settings: ServiceSettings, tmp_path: Path, no_argon2: list[str]
) -> None:
    credentials = start(settings, tmp_path)
    secret = secrets_in(tmp_path)["demo-broker"]

    assert credentials.verify_secret("demo-broker", secret) == credentials.client("demo-broker")
    assert credentials.verify_secret("demo-broker", secret + "x") is None
    assert credentials.verify_secret(f"ghost-{secret[:8]}", secret) is None
    assert no_argon2 == []
    assert credentials.client("demo-broker").secret_hash.startswith("hmac-sha256$")


def test_the_hmac_key_is_generated_once_as_32_random_bytes_apart_from_the_signing_key(
    settings: ServiceSettings, tmp_path: Path
) -> None:
    start(settings, tmp_path)
    stored = json.loads((tmp_path / CREDENTIALS_FILE).read_text())

    key = base64.b64decode(stored[SECRET_HASH_KEY])
    assert len(key) == 32 and stored[SECRET_HASH_KEY] != stored["signing_key"]
    start(settings, tmp_path)
    assert json.loads((tmp_path / CREDENTIALS_FILE).read_text())[SECRET_HASH_KEY] == stored[SECRET_HASH_KEY]


def test_a_stored_argon2_hash_whose_secret_is_in_the_secrets_file_is_rewritten_as_hmac_on_start(
    settings: ServiceSettings, tmp_path: Path
) -> None:
    start(settings, tmp_path)
    secret = secrets_in(tmp_path)["demo-auditor"]
    store_argon2_hash(tmp_path, "demo-auditor", secret)

    credentials = start(settings, tmp_path)

    record = credentials.client("demo-auditor")
    assert record.secret_hash.startswith("hmac-sha256$")
    assert stored_hash(tmp_path, "demo-auditor") == record.secret_hash
    assert credentials.verify_secret("demo-auditor", secret) == record


def test_a_stored_argon2_hash_the_secrets_file_does_not_match_is_left_as_it_is_on_start(
    settings: ServiceSettings, tmp_path: Path
) -> None:
    start(settings, tmp_path)
    legacy = store_argon2_hash(tmp_path, "demo-auditor", "a-secret-the-file-does-not-hold")

    credentials = start(settings, tmp_path)

    assert credentials.client("demo-auditor").secret_hash == legacy
    assert credentials.verify_secret("demo-auditor", "a-secret-the-file-does-not-hold") is not None


def test_a_stored_argon2_hash_without_its_plaintext_logs_in_and_is_rewritten_as_hmac_then(
    settings: ServiceSettings, tmp_path: Path
) -> None:
    start(settings, tmp_path)
    secret = secrets_in(tmp_path)["demo-auditor"]
    legacy = store_argon2_hash(tmp_path, "demo-auditor", secret)
    forget_plaintext(tmp_path)
    credentials = start(settings, tmp_path)
    assert credentials.client("demo-auditor").secret_hash == legacy

    record = credentials.verify_secret("demo-auditor", secret)

    assert record is not None and record.secret_hash.startswith("hmac-sha256$")
    assert credentials.client("demo-auditor") == record
    assert stored_hash(tmp_path, "demo-auditor") == record.secret_hash
    assert start(settings, tmp_path).client("demo-auditor") == record


def test_a_migrated_client_is_checked_without_argon2_afterwards(
    settings: ServiceSettings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    start(settings, tmp_path)
    secret = secrets_in(tmp_path)["demo-auditor"]
    store_argon2_hash(tmp_path, "demo-auditor", secret)
    forget_plaintext(tmp_path)
    credentials = start(settings, tmp_path)
    assert credentials.verify_secret("demo-auditor", secret) is not None
    checked: list[str] = []
    monkeypatch.setattr(PasswordHasher, "verify", lambda self, stored, given: checked.append(stored))

    assert credentials.verify_secret("demo-auditor", secret + "x") is None
    assert credentials.verify_secret("demo-auditor", secret) is not None
    assert checked == []


def test_only_a_client_stored_with_argon2_is_costly_to_check(
    settings: ServiceSettings, tmp_path: Path
) -> None:
    start(settings, tmp_path)
    secret = secrets_in(tmp_path)["demo-auditor"]
    store_argon2_hash(tmp_path, "demo-auditor", secret)
    forget_plaintext(tmp_path)
    credentials = start(settings, tmp_path)

    assert credentials.costly_to_check("demo-auditor")
    assert not credentials.costly_to_check("demo-broker")
    assert not credentials.costly_to_check("ghost")
    assert credentials.verify_secret("demo-auditor", secret) is not None
    assert not credentials.costly_to_check("demo-auditor")  # rewritten as HMAC by its login


def test_a_wrong_secret_leaves_a_stored_argon2_hash_as_it_is(
    settings: ServiceSettings, tmp_path: Path
) -> None:
    start(settings, tmp_path)
    legacy = store_argon2_hash(tmp_path, "demo-auditor", secrets_in(tmp_path)["demo-auditor"])
    forget_plaintext(tmp_path)
    credentials = start(settings, tmp_path)

    assert credentials.verify_secret("demo-auditor", "not-the-secret") is None
    assert credentials.client("demo-auditor").secret_hash == legacy
    assert stored_hash(tmp_path, "demo-auditor") == legacy


def test_a_credentials_file_of_before_hmac_gets_its_key_and_its_records_rewritten_on_start(
    settings: ServiceSettings, tmp_path: Path
) -> None:
    start(settings, tmp_path)
    secret = secrets_in(tmp_path)["demo-broker"]
    store_argon2_hash(tmp_path, "demo-broker", secret)
    old = json.loads((tmp_path / CREDENTIALS_FILE).read_text())
    del old[SECRET_HASH_KEY]
    (tmp_path / CREDENTIALS_FILE).write_text(json.dumps(old))

    credentials = start(settings, tmp_path)

    assert SECRET_HASH_KEY in json.loads((tmp_path / CREDENTIALS_FILE).read_text())
    assert credentials.signing_key == base64.b64decode(old["signing_key"])
    assert stored_hash(tmp_path, "demo-broker").startswith("hmac-sha256$")
    assert credentials.verify_secret("demo-broker", secret) is not None


def test_a_configured_argon2_hash_is_not_rewritten(settings: ServiceSettings, tmp_path: Path) -> None:
    configured = fast_hasher().hash("configured-secret")
    custom = with_partner(
        settings,
        "own",
        {"own-client": Client(roles=[Role.AUDITOR], secret_hash=configured)},
    )
    credentials = start(custom, tmp_path)

    assert credentials.verify_secret("own-client", "configured-secret") is not None
    assert credentials.client("own-client").secret_hash == configured
    assert "own-client" not in json.loads((tmp_path / CREDENTIALS_FILE).read_text())["clients"]
