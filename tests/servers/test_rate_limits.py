"""Bursts of concurrent requests against a rate-limited server process: the rate limits hold, a refused write
writes nothing and leaves its key free, and nothing is answered with a 5xx.

The server is small (one worker, so one set of buckets), on the session's database, with settings that allow
2 requests per second in bursts of 10 and brokers of its own, so that each test drains buckets of its own.
"""

from __future__ import annotations

import math
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import pytest

from application.settings import DEFAULT_SETTINGS
from interface.idempotency.keys import transaction_code_for
from tests.bursts import assert_never_created, bought, burst
from tests.e2e.support import (
    AddressSource,
    Api,
    active_customer,
    api_client,
    buy_body,
    client_secrets,
    describe,
    expect,
    expect_problem,
    obtain_token,
)
from tests.processes import running_server

RATE, BURST = 2, 10
DEMO_LIMITS = "requests_per_second = 200\nburst = 400"
LAST_DEMO_CLIENT = 'clients.demo-auditor = { roles = ["auditor"] }'
# brokers of partner demo added on the limited server, each with a bucket of its own
READER = "burst-reader"
WRITER = "burst-writer"
NEIGHBOUR = "burst-neighbour"
REQUESTER = "burst-token-requester"
LIMITED_CLIENTS = (READER, WRITER, NEIGHBOUR, REQUESTER)
AUDITOR = "demo-auditor"


@dataclass
class LimitedServer:
    url: str
    secrets: dict[str, str]
    tokens: dict[str, str]

    def client(self, client_id: str) -> Api:
        return api_client(self.url, self.tokens[client_id])


@pytest.fixture(scope="module")
def limited(database_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LimitedServer]:
    """A one-worker server on the session's database, limited to RATE requests per second in bursts of
    BURST, with the demo settings' clients and those of LIMITED_CLIENTS."""
    root = tmp_path_factory.mktemp("rate-limited")
    text = DEFAULT_SETTINGS.read_text()
    assert DEMO_LIMITS in text and LAST_DEMO_CLIENT in text
    clients = "".join(f'\nclients.{client} = {{ roles = ["broker"] }}' for client in LIMITED_CLIENTS)
    settings = root / "settings.toml"
    settings.write_text(
        text.replace(DEMO_LIMITS, f"requests_per_second = {RATE}\nburst = {BURST}").replace(
            LAST_DEMO_CLIENT, LAST_DEMO_CLIENT + clients
        )
    )
    var = root / "var"
    with running_server(database_url, var, root / "server.log", workers=1, settings=settings) as server:
        url = server.base_url
        secrets = client_secrets(var)
        # POST /connect/token counts against the address: these take five of its BURST
        tokens = {
            client: obtain_token(url, client, secrets[client]) for client in (*LIMITED_CLIENTS, AUDITOR)
        }
        yield LimitedServer(url, secrets, tokens)


def split_by_rate_limit(
    responses: list[httpx.Response], elapsed: float, allowed_status: int
) -> tuple[list[httpx.Response], list[httpx.Response]]:
    """The allowed and the refused answers of a burst from one client (or address). Every answer is one or
    the other; no more are allowed than a full bucket holds plus what it refilled meanwhile; the refused
    ones are 429 `rate_limited` problems with a Retry-After of whole seconds, at least 1."""
    statuses = Counter(response.status_code for response in responses)
    assert set(statuses) <= {allowed_status, 429}, statuses
    allowed = [response for response in responses if response.status_code == allowed_status]
    refused = [response for response in responses if response.status_code == 429]
    assert len(allowed) <= BURST + math.floor(RATE * elapsed) + 1, (statuses, elapsed)
    assert refused, statuses
    for response in refused:
        problem = expect_problem(response, 429, "rate_limited")
        assert "Retry-After" in problem["detail"], problem
        assert response.headers["retry-after"].isdigit(), describe(response)
        assert 1 <= int(response.headers["retry-after"]) <= math.ceil(1 / RATE), describe(response)
        assert response.headers["ratelimit"].startswith('"default";r=0;t='), describe(response)
        assert problem["requestId"] == response.headers["x-request-id"]
    for response in responses:  # the IETF fields on every answer, the bucket's size per its time to fill
        assert response.headers["ratelimit-policy"] == f'"default";q={BURST};w={math.ceil(BURST / RATE)}'
    return allowed, refused


def wait_as_told(refused: list[httpx.Response]) -> None:
    time.sleep(max(int(response.headers["retry-after"]) for response in refused))


# --- rate limits --------------------------------------------------------------------------------------


def test_a_burst_over_a_clients_rate_is_refused_with_429_and_retry_after_and_served_after_it(
    limited: LimitedServer,
) -> None:
    with limited.client(READER) as reader:
        responses, elapsed = burst(lambda _: reader.get("/prices/EUR"), 4 * BURST)

        allowed, refused = split_by_rate_limit(responses, elapsed, 200)

        assert len(allowed) >= BURST  # a fresh client may send a whole burst at once
        assert all(expect(response, 200)["currencyCode"] == "EUR" for response in allowed)
        wait_as_told(refused)
        assert expect(reader.get("/prices/EUR"), 200)["currencyCode"] == "EUR"


def test_one_clients_burst_leaves_other_clients_and_health_checks_alone(limited: LimitedServer) -> None:
    with limited.client(READER) as reader, limited.client(NEIGHBOUR) as neighbour:
        responses, elapsed = burst(lambda _: reader.get("/prices/EUR"), 3 * BURST)
        split_by_rate_limit(responses, elapsed, 200)

        assert expect(neighbour.get("/prices/EUR"), 200)["currencyCode"] == "EUR"
        health, _ = burst(lambda _: httpx.get(f"{limited.url}/health", timeout=30), 3 * BURST)
        assert [response.status_code for response in health] == [200] * 3 * BURST


def test_refused_writes_write_nothing_and_their_keys_stay_free(
    limited: LimitedServer, addresses: AddressSource
) -> None:
    with limited.client(WRITER) as writer:
        customer = active_customer(writer, addresses())  # three requests
        keys = [f"burst-{uuid.uuid4().hex}" for _ in range(2 * BURST)]

        def create(index: int) -> httpx.Response:
            return writer.post_json("/brokerbuy", buy_body(customer, 10), {"Idempotency-Key": keys[index]})

        responses, elapsed = burst(create, len(keys))

        allowed, refused = split_by_rate_limit(responses, elapsed, 201)
        refused_keys = [
            key for key, response in zip(keys, responses, strict=True) if response.status_code == 429
        ]
        wait_as_told(refused)
        assert bought(writer, customer) == 10 * len(allowed)
        with limited.client(AUDITOR) as auditor:  # the writer's bucket is nearly empty; the auditor's is full
            for key in refused_keys[:5]:
                assert_never_created(auditor, key)

        wait_as_told(refused)
        key = refused_keys[0]
        retried = writer.post_json("/brokerbuy", buy_body(customer, 10), {"Idempotency-Key": key})
        assert expect(retried, 201)["transaction"]["transactionCode"] == transaction_code_for(
            "demo", "/brokerbuy", key
        )
        assert "idempotent-replayed" not in retried.headers


def test_a_burst_of_token_requests_is_limited_per_address(limited: LimitedServer) -> None:
    form = {
        "grant_type": "client_credentials",
        "client_id": REQUESTER,
        "client_secret": limited.secrets[REQUESTER],
    }

    def request_token(_: int) -> httpx.Response:
        return httpx.post(f"{limited.url}/connect/token", data=form, timeout=60)

    responses, elapsed = burst(request_token, 2 * BURST)

    allowed, refused = split_by_rate_limit(responses, elapsed, 200)
    assert allowed and all(expect(response, 200)["token_type"] == "Bearer" for response in allowed)
    with limited.client(NEIGHBOUR) as neighbour:  # a client with a token is counted apart from its address
        assert expect(neighbour.get("/prices/EUR"), 200)["currencyCode"] == "EUR"
    wait_as_told(refused)
    assert expect(request_token(0), 200)["token_type"] == "Bearer"
