"""The token endpoint cannot be used to burn the service's CPU: bad secrets are refused with no argon2 check,
and a flood of made-up client ids from one address is answered 401, then 429, never 5xx.

In-process, against the package's app (`app`, tests/e2e/conftest.py) through litestar's test client, so that
argon2 can be watched with monkeypatch. Every request comes from the test client's one address. The limiter
of failed attempts is new for each test, and left new after it.
"""

from __future__ import annotations

import secrets
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from argon2 import PasswordHasher

from application.credentials import Credentials
from application.secret_hashes import SecretChecksBusy
from interface.http.auth import FailedAttempts
from tests.e2e.support import client_secrets, expect, expect_problem
from tests.in_process import InProcessClient

THREADS = 40
FLOOD = 120
PER_CLIENT_LIMIT = FailedAttempts().limit
PER_ADDRESS_LIMIT = FailedAttempts().address_limit


@pytest.fixture(autouse=True)
def fresh_limiter(app: InProcessClient) -> Iterator[None]:
    """A limiter of failed attempts new for the test, and again after it: the package's other tests ask for
    tokens from the same address."""
    attempts: FailedAttempts = app.app.state.runtime.failed_attempts
    attempts.forget_all()
    yield
    attempts.forget_all()


@pytest.fixture
def argon2_checks(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The hashes argon2 was asked to check during the test (there should be none)."""
    checked: list[str] = []
    verify = PasswordHasher.verify

    def counted(self: PasswordHasher, secret_hash: str, secret: str) -> bool:
        checked.append(secret_hash)
        return verify(self, secret_hash, secret)

    monkeypatch.setattr(PasswordHasher, "verify", counted)
    return checked


def ask_token(app: InProcessClient, client_id: str, secret: str) -> httpx.Response:
    form = {"grant_type": "client_credentials", "client_id": client_id, "client_secret": secret}
    return app.post("/connect/token", data=form)


def made_up() -> tuple[str, str]:
    return f"ghost-{secrets.token_hex(8)}", secrets.token_urlsafe(32)


def test_made_up_client_ids_from_one_address_get_401_until_the_address_limit_then_429(
    app: InProcessClient, argon2_checks: list[str]
) -> None:
    responses = [ask_token(app, *made_up()) for _ in range(PER_ADDRESS_LIMIT + 5)]

    for response in responses[:PER_ADDRESS_LIMIT]:
        expect_problem(response, 401, "invalid_client")
    for response in responses[PER_ADDRESS_LIMIT:]:
        expect_problem(response, 429, "too_many_failed_attempts")
        assert 1 <= int(response.headers["retry-after"]) <= 60
    assert argon2_checks == []


def test_a_flood_from_forty_threads_is_refused_with_401_and_429_and_never_a_5xx(
    app: InProcessClient, argon2_checks: list[str]
) -> None:
    known = sorted(client_secrets(app.var))

    def attempt(index: int) -> int:
        client_id, secret = made_up()
        if index % 3 == 0:
            client_id = known[index % len(known)]  # a known client with a wrong secret
        return ask_token(app, client_id, secret).status_code

    with ThreadPoolExecutor(THREADS) as pool:
        statuses = Counter(pool.map(attempt, range(FLOOD)))

    assert set(statuses) == {401, 429}, statuses
    assert statuses[401] <= PER_ADDRESS_LIMIT
    assert argon2_checks == []


def test_a_known_client_with_wrong_secrets_is_refused_429_after_its_limit_but_its_secret_still_works(
    app: InProcessClient, argon2_checks: list[str]
) -> None:
    secret = client_secrets(app.var)["demo-auditor"]
    statuses = [ask_token(app, "demo-auditor", f"{secret}-{n}").status_code for n in range(PER_CLIENT_LIMIT)]

    locked = ask_token(app, "demo-auditor", f"{secret}-again")
    right = ask_token(app, "demo-auditor", secret)

    assert statuses == [401] * PER_CLIENT_LIMIT
    expect_problem(locked, 429, "too_many_failed_attempts")
    assert expect(right, 200)["scope"] == "auditor"
    assert argon2_checks == []


def test_the_right_secret_gets_its_token_from_an_address_refused_for_a_flood_of_made_up_ids(
    app: InProcessClient, argon2_checks: list[str]
) -> None:
    flood = [ask_token(app, *made_up()).status_code for _ in range(PER_ADDRESS_LIMIT)]
    assert flood == [401] * PER_ADDRESS_LIMIT
    expect_problem(ask_token(app, *made_up()), 429, "too_many_failed_attempts")

    right = ask_token(app, "demo-broker", client_secrets(app.var)["demo-broker"])
    wrong = ask_token(app, "demo-broker", "not-its-secret")

    assert expect(right, 200)["scope"] == "broker"
    expect_problem(wrong, 429, "too_many_failed_attempts")  # a success does not clear the address's count
    assert argon2_checks == []


def test_an_argon2_hash_of_before_is_not_checked_while_its_address_is_refused(
    app: InProcessClient, argon2_checks: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """(The client is made to look stored with argon2: its right secret, if checked, would get a token.)"""
    monkeypatch.setattr(Credentials, "costly_to_check", lambda self, client_id: client_id == "demo-auditor")
    for _ in range(PER_ADDRESS_LIMIT):
        ask_token(app, *made_up())

    refused = ask_token(app, "demo-auditor", client_secrets(app.var)["demo-auditor"])

    expect_problem(refused, 429, "too_many_failed_attempts")
    assert argon2_checks == []


def test_a_generated_secret_still_gets_a_token_without_argon2(
    app: InProcessClient, argon2_checks: list[str]
) -> None:
    token = expect(ask_token(app, "demo-operator", client_secrets(app.var)["demo-operator"]), 200)

    assert token["token_type"] == "Bearer" and token["scope"] == "operator"
    assert argon2_checks == []


def test_when_no_argon2_check_can_start_the_answer_is_429_with_retry_after(
    app: InProcessClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    def busy(self: Credentials, client_id: str, secret: str) -> None:
        raise SecretChecksBusy

    monkeypatch.setattr(Credentials, "verify_secret", busy)

    response = ask_token(app, "legacy-client", "its-secret")

    expect_problem(response, 429, "secret_checks_busy")
    assert response.headers["retry-after"] == "1"
