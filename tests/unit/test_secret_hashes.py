"""Stored forms of client secrets: HMAC under the server key, and argon2 hashes checked a few at a time."""

from __future__ import annotations

import threading

import pytest
from argon2 import PasswordHasher

from application.secret_hashes import HMAC_PREFIX, SecretChecksBusy, SecretHasher

KEY = bytes(range(32))


def fast_argon2() -> PasswordHasher:
    return PasswordHasher(time_cost=1, memory_cost=8, parallelism=1)


class BlockingArgon2(PasswordHasher):
    """An argon2 hasher whose checks wait until `release` is set, telling when one has begun."""

    def __init__(self) -> None:
        super().__init__(time_cost=1, memory_cost=8, parallelism=1)
        self.begun = threading.Semaphore(0)
        self.release = threading.Event()

    def verify(self, hash: str | bytes, password: str | bytes) -> bool:
        self.begun.release()
        self.release.wait(timeout=10)
        return super().verify(hash, password)


def test_a_secret_is_stored_as_the_base64_hmac_sha256_under_the_key() -> None:
    stored = SecretHasher(KEY).hash("s3cret")

    assert stored == HMAC_PREFIX + "BB78U3qrhf0eQj+pFrnFZpYTO5t1uwexhLazsxMCT2M="


def test_an_hmac_hash_accepts_its_secret_only() -> None:
    hasher = SecretHasher(KEY)
    stored = hasher.hash("s3cret")

    assert hasher.verify(stored, "s3cret")
    assert not hasher.verify(stored, "s3cret ")
    assert not hasher.verify(stored, "")
    assert not SecretHasher(bytes(32)).verify(stored, "s3cret")  # another key, another hash


@pytest.mark.parametrize("stored", [HMAC_PREFIX, HMAC_PREFIX + "not base64!", HMAC_PREFIX + "c2hvcnQ="])
def test_a_malformed_hmac_hash_accepts_nothing(stored: str) -> None:
    assert not SecretHasher(KEY).verify(stored, "")


def test_the_dummy_hash_is_an_hmac_hash_no_secret_matches() -> None:
    hasher = SecretHasher(KEY)
    dummy = hasher.dummy_hash()

    assert dummy.startswith(HMAC_PREFIX) and dummy != hasher.dummy_hash()
    assert not hasher.verify(dummy, "")


def test_an_argon2_hash_is_still_accepted_with_its_secret_only() -> None:
    legacy = fast_argon2().hash("old-secret")
    hasher = SecretHasher(KEY, fast_argon2())

    assert hasher.verify(legacy, "old-secret")
    assert not hasher.verify(legacy, "another")
    assert not hasher.verify("$argon2id$garbage", "old-secret")


def test_argon2_checks_beyond_the_allowed_number_at_once_are_refused_as_busy() -> None:
    argon2 = BlockingArgon2()
    legacy = fast_argon2().hash("old-secret")
    hasher = SecretHasher(KEY, argon2, legacy_checks_at_once=2, legacy_wait_seconds=0.05)
    results: list[bool] = []
    checks = [
        threading.Thread(target=lambda: results.append(hasher.verify(legacy, "old-secret"))) for _ in "ab"
    ]
    for check in checks:
        check.start()
    for _ in checks:
        assert argon2.begun.acquire(timeout=10)

    with pytest.raises(SecretChecksBusy):
        hasher.verify(legacy, "old-secret")
    assert hasher.verify(hasher.hash("new"), "new")  # HMAC checks never wait for a turn

    argon2.release.set()
    for check in checks:
        check.join(timeout=10)
    assert results == [True, True]
    assert hasher.verify(legacy, "old-secret")  # the turns were given back


def test_a_failed_argon2_check_gives_its_turn_back() -> None:
    legacy = fast_argon2().hash("old-secret")
    hasher = SecretHasher(KEY, fast_argon2(), legacy_checks_at_once=1, legacy_wait_seconds=0.05)

    for _ in range(3):
        assert not hasher.verify(legacy, "wrong")
    assert hasher.verify(legacy, "old-secret")
