"""Access tokens: what is issued verifies, anything forged, expired or foreign does not."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import threading
from datetime import UTC, datetime

import jwt
import pytest

from application.credentials import ClientRecord
from bench.clock import FakeClock
from interface.http.auth import (
    FailedAttempts,
    InvalidScope,
    InvalidToken,
    Principal,
    TokenService,
    parse_bearer,
)
from interface.http.settings import TokenSettings

KEY = b"k" * 32
START = datetime(2025, 1, 15, 12, 0, tzinfo=UTC)
CLIENT = ClientRecord(
    client_id="demo-desk",
    partner="demo",
    roles=frozenset({"broker", "operator"}),
    secret_hash="unused",
)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(START)


@pytest.fixture
def service(clock: FakeClock) -> TokenService:
    return TokenService(TokenSettings(), KEY, clock)


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def segment(value: dict) -> str:
    return b64url(json.dumps(value).encode())


def valid_claims(**changes: object) -> dict:
    now = int(START.timestamp())
    claims = {
        "iss": "broker-ledger",
        "aud": "broker-ledger-api",
        "sub": "demo-desk",
        "partner": "demo",
        "roles": ["broker"],
        "iat": now,
        "exp": now + 3600,
        "jti": "abc",
    }
    claims.update(changes)
    return {name: value for name, value in claims.items() if value is not None}


def test_an_issued_token_verifies_to_its_client(service: TokenService) -> None:
    issued = service.issue(CLIENT)

    assert issued.token_type == "Bearer"
    assert issued.expires_in == 3600
    assert issued.scope == "broker operator"
    assert service.verify(issued.access_token) == Principal(
        client_id="demo-desk", partner="demo", roles=frozenset({"broker", "operator"})
    )


def test_a_token_carries_the_expected_claims(service: TokenService) -> None:
    token = service.issue(CLIENT).access_token

    header = jwt.get_unverified_header(token)
    claims = jwt.decode(token, options={"verify_signature": False})
    assert header["alg"] == "HS256"
    assert claims["exp"] - claims["iat"] == 3600
    assert claims["iat"] == int(START.timestamp())
    assert {"iss", "aud", "sub", "partner", "roles", "jti"} <= set(claims)
    assert service.issue(CLIENT).access_token != token  # each token has its own jti


def test_a_scope_narrows_the_roles_to_a_subset(service: TokenService) -> None:
    issued = service.issue(CLIENT, "operator")

    assert issued.scope == "operator"
    assert service.verify(issued.access_token).roles == frozenset({"operator"})
    assert service.issue(CLIENT, "  ").scope == "broker operator"


@pytest.mark.parametrize("scope", ["auditor", "broker auditor", "admin"])
def test_a_scope_beyond_the_clients_roles_is_refused(service: TokenService, scope: str) -> None:
    with pytest.raises(InvalidScope):
        service.issue(CLIENT, scope)


def test_a_token_is_valid_until_it_expires_give_or_take_the_leeway(
    service: TokenService, clock: FakeClock
) -> None:
    token = service.issue(CLIENT).access_token

    clock.advance(3600 + 4)
    assert service.verify(token).client_id == "demo-desk"
    clock.advance(2)
    with pytest.raises(InvalidToken, match="expired"):
        service.verify(token)


def test_a_remembered_token_is_checked_against_the_clock_on_every_use(
    service: TokenService, clock: FakeClock
) -> None:
    token = service.issue(CLIENT).access_token
    assert service.verify(token).client_id == "demo-desk"

    clock.advance(-60)
    with pytest.raises(InvalidToken, match="future"):
        service.verify(token)
    clock.advance(60 + 3600 + 6)
    with pytest.raises(InvalidToken, match="expired"):
        service.verify(token)


def test_a_token_issued_in_the_future_is_refused(service: TokenService, clock: FakeClock) -> None:
    clock.advance(60)
    token = service.issue(CLIENT).access_token
    clock.advance(-60)

    with pytest.raises(InvalidToken, match="future"):
        service.verify(token)


def test_a_token_is_refused_before_its_not_before_time_give_or_take_the_leeway(
    service: TokenService, clock: FakeClock
) -> None:
    token = jwt.encode(valid_claims(nbf=int(START.timestamp()) + 60), KEY, algorithm="HS256")

    with pytest.raises(InvalidToken, match="not valid yet"):
        service.verify(token)
    clock.advance(54)
    with pytest.raises(InvalidToken, match="not valid yet"):
        service.verify(token)
    clock.advance(1)
    assert service.verify(token).client_id == "demo-desk"


def test_a_token_signed_with_another_key_is_refused(service: TokenService, clock: FakeClock) -> None:
    forged = TokenService(TokenSettings(), b"x" * 32, clock).issue(CLIENT).access_token

    for _ in range(2):  # a refused token is not remembered as verified
        with pytest.raises(InvalidToken, match="signature"):
            service.verify(forged)


def test_a_tampered_token_is_refused(service: TokenService) -> None:
    header, payload, signature = service.issue(CLIENT, "broker").access_token.split(".")
    claims = json.loads(base64.urlsafe_b64decode(payload + "=="))
    claims["roles"] = ["broker", "operator", "auditor"]

    with pytest.raises(InvalidToken, match="signature"):
        service.verify(f"{header}.{segment(claims)}.{signature}")


def test_a_token_for_another_audience_is_refused(service: TokenService, clock: FakeClock) -> None:
    other = TokenService(TokenSettings(audience="someone-else"), KEY, clock)

    with pytest.raises(InvalidToken, match="audience"):
        service.verify(other.issue(CLIENT).access_token)


def test_a_token_from_another_issuer_is_refused(service: TokenService, clock: FakeClock) -> None:
    other = TokenService(TokenSettings(issuer="someone-else"), KEY, clock)

    with pytest.raises(InvalidToken, match="issued by someone else"):
        service.verify(other.issue(CLIENT).access_token)


def test_an_unsigned_alg_none_token_is_refused(service: TokenService) -> None:
    token = f"{segment({'alg': 'none', 'typ': 'JWT'})}.{segment(valid_claims())}."

    with pytest.raises(InvalidToken, match="algorithm"):
        service.verify(token)


@pytest.mark.filterwarnings("ignore::jwt.InsecureKeyLengthWarning")
def test_a_token_signed_with_hs512_is_refused(service: TokenService) -> None:
    token = jwt.encode(valid_claims(), KEY, algorithm="HS512")

    with pytest.raises(InvalidToken, match="algorithm"):
        service.verify(token)


def test_an_rs256_header_over_an_hmac_signature_is_refused(service: TokenService) -> None:
    # Key confusion: a verifier trusting the header would check an RSA signature, or an HMAC keyed
    # with a public key. Sign with our own HMAC key, so that only the header can refuse it.
    signing_input = f"{segment({'alg': 'RS256', 'typ': 'JWT'})}.{segment(valid_claims())}"
    signature = hmac.new(KEY, signing_input.encode(), hashlib.sha256).digest()

    with pytest.raises(InvalidToken, match="algorithm"):
        service.verify(f"{signing_input}.{b64url(signature)}")


@pytest.mark.parametrize(
    "token", ["", "garbage", "a.b.c", "a.b", "....", segment({"alg": "HS256"}) + ".e30.xyz"]
)
def test_garbage_is_refused(service: TokenService, token: str) -> None:
    with pytest.raises(InvalidToken):
        service.verify(token)


@pytest.mark.parametrize("claim", ["exp", "iss", "aud", "sub", "partner", "roles", "iat", "jti"])
def test_a_token_missing_a_required_claim_is_refused(service: TokenService, claim: str) -> None:
    token = jwt.encode(valid_claims(**{claim: None}), KEY, algorithm="HS256")

    with pytest.raises(InvalidToken, match=claim):
        service.verify(token)


@pytest.mark.parametrize(
    "changes",
    [
        {"exp": "tomorrow"},
        {"iat": True},
        {"nbf": "soon"},
        {"roles": "broker"},
        {"roles": [1]},
        {"partner": 7},
    ],
)
def test_a_token_with_ill_typed_claims_is_refused(service: TokenService, changes: dict) -> None:
    token = jwt.encode(valid_claims(**changes), KEY, algorithm="HS256")

    with pytest.raises(InvalidToken):
        service.verify(token)


def test_the_reason_is_readable(service: TokenService) -> None:
    with pytest.raises(InvalidToken) as caught:
        service.verify("garbage")

    assert caught.value.reason == "the token is not a well-formed JWT"
    assert str(caught.value) == caught.value.reason


def test_parse_bearer_takes_the_token_of_a_bearer_header() -> None:
    assert parse_bearer("Bearer abc.def.ghi") == "abc.def.ghi"
    assert parse_bearer("bearer   abc") == "abc"


@pytest.mark.parametrize("value", [None, "", "   ", "abc", "Basic abc", "Bearer", "Bearer a b"])
def test_parse_bearer_refuses_a_missing_or_malformed_header(value: str | None) -> None:
    with pytest.raises(InvalidToken):
        parse_bearer(value)


class FakeTime:
    def __init__(self) -> None:
        self.value = 1000.0

    def __call__(self) -> float:
        return self.value


def test_failed_attempts_block_after_the_limit_until_the_window_passes() -> None:
    time = FakeTime()
    limiter = FailedAttempts(limit=3, window_seconds=60, now=time)

    for _ in range(2):
        limiter.record_failure("demo-broker", "10.0.0.1")
        time.value += 10
    assert limiter.check("demo-broker", "10.0.0.1") is None
    limiter.record_failure("demo-broker", "10.0.0.1")

    assert limiter.check("demo-broker", "10.0.0.1") == 40  # the first failure, at 1000, leaves at 1060
    time.value = 1059.5
    assert limiter.check("demo-broker", "10.0.0.1") == 1
    time.value = 1060
    assert limiter.check("demo-broker", "10.0.0.1") is None


def test_failed_attempts_are_counted_per_client_and_address() -> None:
    limiter = FailedAttempts(limit=1, window_seconds=60, now=FakeTime())
    limiter.record_failure("demo-broker", "10.0.0.1")

    assert limiter.check("demo-broker", "10.0.0.1") == 60
    assert limiter.check("demo-broker", "10.0.0.2") is None
    assert limiter.check("other-broker", "10.0.0.1") is None


def test_failures_of_many_client_ids_from_one_address_block_that_address() -> None:
    limiter = FailedAttempts(limit=10, window_seconds=60, address_limit=3, now=FakeTime())
    for index in range(2):
        limiter.record_failure(f"made-up-{index}", "10.0.0.1")
    assert limiter.check("made-up-2", "10.0.0.1") is None

    limiter.record_failure("made-up-2", "10.0.0.1")

    assert limiter.check("made-up-3", "10.0.0.1") == 60
    assert limiter.check("demo-broker", "10.0.0.1") == 60  # a known client id is no way round it
    assert limiter.check("made-up-3", "10.0.0.2") is None


def test_a_success_clears_the_client_count_but_not_the_address_count() -> None:
    limiter = FailedAttempts(limit=2, window_seconds=60, address_limit=3, now=FakeTime())
    limiter.record_failure("demo-broker", "10.0.0.1")
    limiter.record_failure("demo-broker", "10.0.0.1")

    limiter.clear("demo-broker", "10.0.0.1")

    assert limiter.check("demo-broker", "10.0.0.1") is None
    limiter.record_failure("demo-broker", "10.0.0.1")
    assert limiter.check("other-broker", "10.0.0.1") == 60


def test_failed_attempts_forget_the_oldest_keys_when_full(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(FailedAttempts, "MAX_KEYS", 4)
    limiter = FailedAttempts(limit=1, window_seconds=60, address_limit=100, now=FakeTime())
    for client_id in "abcd":  # a, the address, b and c fill the table; d finds it full
        limiter.record_failure(client_id, "10.0.0.1")

    assert limiter.check("a", "10.0.0.1") is None
    assert all(limiter.check(client_id, "10.0.0.1") == 60 for client_id in "bcd")


def test_failed_attempts_count_every_failure_from_many_threads() -> None:
    limiter = FailedAttempts(limit=1000, window_seconds=60, address_limit=10_000)
    barrier = threading.Barrier(8)

    def fail_100_times() -> None:
        barrier.wait()
        for _ in range(100):
            limiter.record_failure("demo-broker", "10.0.0.1")
            limiter.check("demo-broker", "10.0.0.1")

    threads = [threading.Thread(target=fail_100_times) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    for _ in range(199):
        limiter.record_failure("demo-broker", "10.0.0.1")
    assert limiter.check("demo-broker", "10.0.0.1") is None  # 999 failures
    limiter.record_failure("demo-broker", "10.0.0.1")
    assert limiter.check("demo-broker", "10.0.0.1") is not None


def test_concurrent_failures_from_one_address_are_counted_up_to_its_limit_and_no_further() -> None:
    limiter = FailedAttempts(limit=10, window_seconds=60, address_limit=30)
    barrier = threading.Barrier(40)
    outcomes: list[int | None] = []

    def fail_once(index: int) -> None:
        barrier.wait()
        outcomes.append(limiter.record_failure(f"made-up-{index}", "10.0.0.1"))

    threads = [threading.Thread(target=fail_once, args=(index,)) for index in range(40)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert outcomes.count(None) == 30  # answered 401; the other ten are told to wait (429)
    assert all(wait == 60 for wait in outcomes if wait is not None)
