"""The IETF RateLimit fields on every answer of a rate-limited route: `RateLimit-Policy` says the bucket's
size and the seconds it takes to fill, `RateLimit` what is left after the request and when all of it is back;
the remaining count reaches 0 on the request before the 429, which says so too, with `Retry-After`.

In-process, against the real app on the session's database, with settings that allow 6 requests in a burst
and one more every 20 s, so that nothing refills while a test runs; each test drains a client of its own.
"""

from __future__ import annotations

import re
import uuid

import httpx
import pytest

from application.settings import DEFAULT_SETTINGS
from tests.e2e.support import client_secrets, obtain_token, token_headers
from tests.in_process import InProcessClient, in_process_app

RATE, BURST = 0.05, 6
WINDOW = 120  # BURST / RATE: the seconds a drained bucket takes to fill
POLICY = f'"default";q={BURST};w={WINDOW}'
STATE = re.compile(r'"default";r=(\d+);t=(\d+)')
DEMO_LIMITS = "requests_per_second = 200\nburst = 400"
TEXT = DEFAULT_SETTINGS.read_text()
assert DEMO_LIMITS in TEXT

client = in_process_app(settings=TEXT.replace(DEMO_LIMITS, f"requests_per_second = {RATE}\nburst = {BURST}"))


@pytest.fixture(scope="module")
def headers(client: InProcessClient) -> dict[str, dict[str, str]]:
    """Each client's headers: four token requests, from the test client's address bucket of six."""
    secrets = client_secrets(client.var)
    clients = ("demo-broker", "demo-operator", "demo-auditor", "other-broker")
    return {name: token_headers(obtain_token(client, name, secrets[name])) for name in clients}


def standing(answer: httpx.Response) -> tuple[int, int]:
    """(remaining, reset) of an answer's RateLimit field, after checking its policy."""
    assert answer.headers.get_list("ratelimit-policy") == [POLICY], answer.headers
    [field] = answer.headers.get_list("ratelimit")
    match = STATE.fullmatch(field)
    assert match, field
    return int(match.group(1)), int(match.group(2))


def test_remaining_counts_down_to_zero_and_the_next_request_is_the_429(client, headers):
    answers = [client.get("/prices/EUR", headers=headers["demo-broker"]) for _ in range(BURST + 2)]

    assert [answer.status_code for answer in answers] == [200] * BURST + [429, 429]
    counted = [standing(answer) for answer in answers]
    assert [remaining for remaining, _ in counted] == [5, 4, 3, 2, 1, 0, 0, 0]
    resets = [reset for _, reset in counted]
    # the seconds until the bucket is full: 20 s for each request taken, less what refilled meanwhile
    assert all(
        20 * taken - 20 < reset <= 20 * taken for taken, reset in zip(range(1, 7), resets, strict=False)
    )
    assert resets == sorted(resets) and resets[-1] <= WINDOW
    refused = answers[BURST]
    retry_after = int(refused.headers["retry-after"])
    assert 0 < retry_after <= 20 and retry_after <= resets[BURST]
    assert refused.json()["code"] == "rate_limited"
    assert refused.json()["requestId"] == refused.headers["x-request-id"]


def test_a_refusal_of_a_counted_request_carries_the_fields_and_costs_its_token(client, headers):
    missing = f"/customer/nobody-{uuid.uuid4().hex[:8]}"  # a broker's route: the operator is refused
    first = client.get(missing, headers=headers["demo-operator"])
    second = client.get("/prices/EUR", headers={**headers["demo-operator"], "api_version": "0.1"})

    assert first.status_code == 403, first.text
    assert second.status_code == 400, second.text
    assert standing(first)[0] == BURST - 1
    assert standing(second)[0] == BURST - 2


def test_requests_refused_before_they_are_counted_and_unlimited_paths_carry_no_fields(client, headers):
    no_token = client.get("/prices/EUR")
    bad_token = client.get("/prices/EUR", headers={**headers["demo-auditor"], "Authorization": "Bearer x"})
    health = client.get("/health/live")
    document = client.get("/schema/openapi.json")

    assert [no_token.status_code, bad_token.status_code, health.status_code] == [401, 401, 200]
    for answer in (no_token, bad_token, health, document):
        assert "ratelimit" not in answer.headers and "ratelimit-policy" not in answer.headers
        assert answer.headers["x-request-id"]
    assert standing(client.get("/prices/EUR", headers=headers["demo-auditor"]))[0] == BURST - 1


def test_a_replayed_answer_carries_the_replaying_requests_standing(client, headers):
    broker = headers["other-broker"]
    body = {"customerCode": f"rl-{uuid.uuid4().hex[:12]}", "trustLevel": "Basic"}
    key = {"Idempotency-Key": f"rl-{uuid.uuid4().hex}"}

    first = client.post("/customer", json=body, headers={**broker, **key})
    replay = client.post("/customer", json=body, headers={**broker, **key})

    assert first.status_code == replay.status_code == 201, replay.text
    assert replay.headers["idempotent-replayed"] == "true"
    assert standing(first)[0] == BURST - 1
    assert standing(replay)[0] == BURST - 2
