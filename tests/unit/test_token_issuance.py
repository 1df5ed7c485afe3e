"""POST /connect/token's use case in memory: the right secret gets a token with the client's roles, a wrong
one is 401 and counted, and once the client id has failed too often further failures are 429 while the right
secret still gets its token."""

from __future__ import annotations

from pathlib import Path

import pytest
from argon2 import PasswordHasher

from application.credentials import load_or_create_credentials
from application.settings import DEFAULT_SETTINGS
from bench.clock import FakeClock
from interface.http.auth import FailedAttempts, TokenService
from interface.http.problems import ApiProblem
from interface.http.settings import TokenSettings, load_service_settings
from interface.shared.token_issuance import TokenIssuance

ADDRESS = "10.0.0.1"


@pytest.fixture
def issuance(tmp_path: Path) -> TokenIssuance:
    fast = PasswordHasher(time_cost=1, memory_cost=8, parallelism=1)
    credentials = load_or_create_credentials(load_service_settings(DEFAULT_SETTINGS), tmp_path, argon2=fast)
    tokens = TokenService(TokenSettings(), credentials.signing_key, FakeClock())
    return TokenIssuance(credentials, tokens, FailedAttempts(limit=3, now=lambda: 0.0))


@pytest.fixture
def secret(tmp_path: Path) -> str:
    lines = (tmp_path / "client-secrets.txt").read_text().splitlines()
    return dict(line.split("=", 1) for line in lines)["demo-broker"]


def refusal(issuance: TokenIssuance, secret: str, scope: str | None = None) -> ApiProblem:
    with pytest.raises(ApiProblem) as refused:
        issuance.issue("demo-broker", secret, scope, ADDRESS)
    return refused.value


def test_the_right_secret_gets_a_token_with_the_clients_roles(issuance: TokenIssuance, secret: str) -> None:
    issued = issuance.issue("demo-broker", secret, None, ADDRESS)

    principal = issuance.tokens.verify(issued.access_token)
    assert (principal.client_id, principal.partner, principal.roles) == ("demo-broker", "demo", {"broker"})
    assert issued.scope == "broker"


def test_a_wrong_secret_is_401_until_the_limit_then_429_with_retry_after(
    issuance: TokenIssuance, secret: str
) -> None:
    codes = [refusal(issuance, secret + "x") for _ in range(4)]

    assert [(p.status_code, p.code) for p in codes] == [(401, "invalid_client")] * 3 + [
        (429, "too_many_failed_attempts")
    ]
    assert codes[-1].headers["Retry-After"] == "60"


def test_the_right_secret_gets_its_token_while_the_client_id_is_refused(
    issuance: TokenIssuance, secret: str
) -> None:
    for _ in range(3):
        refusal(issuance, "wrong")

    assert issuance.issue("demo-broker", secret, None, ADDRESS).access_token
    assert refusal(issuance, "wrong").code == "invalid_client"  # the success cleared the client's count


def test_a_scope_naming_a_role_the_client_lacks_is_400_invalid_scope(
    issuance: TokenIssuance, secret: str
) -> None:
    problem = refusal(issuance, secret, "operator")

    assert (problem.status_code, problem.code) == (400, "invalid_scope")
