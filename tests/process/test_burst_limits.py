"""Bursts of concurrent requests against the real server process: rate limits and request size limits hold,
and nothing is answered with a 5xx.

The rate limits are tried on a second, small server (one worker, so one set of buckets) whose settings allow
2 requests per second in bursts of 10, with brokers of its own so that each test drains buckets of its own.
The size and malformed-body bursts go to the session's server with the demo settings (200 requests per
second in bursts of 400 per client and worker), where they are refused for their bodies, not their rate.
"""

from __future__ import annotations

import math
import random
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path

import httpx
import pytest

from application.settings import DEFAULT_SETTINGS
from interface.idempotency import MAX_BODY, transaction_code_for
from tests.e2e.support import (
    ENCODER,
    AddressSource,
    Api,
    Customer,
    active_customer,
    api_client,
    buy_body,
    client_secrets,
    describe,
    expect,
    expect_problem,
    limits_used,
    obtain_token,
    running_server,
)

RATE, BURST = 2, 10
THREADS = 16
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
    with running_server(database_url, var, root / "server.log", workers=1, settings=settings) as url:
        secrets = client_secrets(var)
        # POST /connect/token counts against the address: these take five of its BURST
        tokens = {
            client: obtain_token(url, client, secrets[client]) for client in (*LIMITED_CLIENTS, AUDITOR)
        }
        yield LimitedServer(url, secrets, tokens)


def burst(send: Callable[[int], httpx.Response], count: int) -> tuple[list[httpx.Response], float]:
    """`count` requests from THREADS threads at once; the answers and the seconds the burst took."""
    started = time.monotonic()
    with ThreadPoolExecutor(THREADS) as pool:
        responses = list(pool.map(send, range(count)))
    return responses, time.monotonic() - started


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
    return allowed, refused


def wait_as_told(refused: list[httpx.Response]) -> None:
    time.sleep(max(int(response.headers["retry-after"]) for response in refused))


def bought(api: Api, customer: Customer) -> Decimal:
    """What the customer has bought today, exactly: from its limit windows in the event store. The month's
    figure must be the same, and nothing is sold."""
    used = limits_used(api, customer.code)
    assert used[("buy", "daily")] == used[("buy", "monthly")], used
    assert used[("sell", "daily")] == used[("sell", "monthly")] == 0, used
    return used[("buy", "daily")]


def assert_never_created(api: Api, key: str) -> None:
    """No transaction was ever recorded under the Idempotency-Key `key`: its history, read from the event
    store (not a read model), does not exist."""
    code = transaction_code_for("demo", "/brokerbuy", key)
    expect_problem(api.get(f"/transactions/custodian/{code}/history"), 404, "transaction_not_found")


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


# --- request size and malformed bodies ------------------------------------------------------------------


@dataclass(frozen=True)
class Refused:
    """A request body the service must refuse, with the status and code it must refuse it with."""

    case: str
    content: bytes | None
    status: int
    code: str
    chunked: bool = False  # sent without Content-Length, in chunks of 16 KiB

    def sent(self) -> bytes | Iterator[bytes] | None:
        if self.content is None or not self.chunked:
            return self.content
        return (self.content[start : start + 16384] for start in range(0, len(self.content), 16384))


def padded(body: bytes, size: int) -> bytes:
    """`body` (a JSON object) with whitespace before its closing brace, `size` bytes long: still valid."""
    return body[:-1] + b" " * (size - len(body)) + b"}"


def refused_buys(body: bytes) -> list[Refused]:
    """A create-buy `body` made too large, or malformed."""
    amount = b'"fiatValue":10'
    assert amount in body
    too_large, malformed, invalid = (
        (413, "request_too_large"),
        (400, "malformed_request"),
        (422, "validation_failed"),
    )
    return [
        Refused("one byte over", padded(body, MAX_BODY + 1), *too_large),
        Refused("four times over", padded(body, 4 * MAX_BODY), *too_large),
        Refused("one byte over, chunked", padded(body, MAX_BODY + 1), *too_large, chunked=True),
        Refused("a mebibyte, chunked", padded(body, 1 << 20), *too_large, chunked=True),
        Refused("no body", None, *malformed),
        Refused("cut short", body[:-1], *malformed),
        Refused("not JSON", b"customerCode=alice", *malformed),
        Refused("NaN", body.replace(amount, b'"fiatValue":NaN'), *malformed),
        Refused("not UTF-8", body.replace(b'"EUR"', b'"\xff\xfe"'), *malformed),
        Refused("nested too deeply", b"[" * 30000 + b"]" * 30000, *malformed),
        Refused("an array", b"[" + body + b"]", *invalid),
        Refused("an unknown field", body[:-1] + b',"extra":1}', *invalid),
        Refused("an amount as a string", body.replace(amount, b'"fiatValue":"10"'), *invalid),
        Refused("an amount of 1e999999", body.replace(amount, b'"fiatValue":1e999999'), *invalid),
    ]


def test_a_burst_of_oversized_and_malformed_bodies_is_refused_without_a_5xx_nor_a_write(
    broker: Api, customer: Customer, server_log: Path
) -> None:
    """Each body is sent four times without and four times with an Idempotency-Key, all shuffled. A refusal
    for size comes before the key is claimed; one for the body's content is kept under its key (and replayed
    for the same body), as every answer below 500 is."""
    sends = [
        (refused, f"refused-{uuid.uuid4().hex}" if keyed else None)
        for refused in refused_buys(ENCODER.encode(buy_body(customer, 10))) * 4
        for keyed in (False, True)
    ]
    random.Random(20261122).shuffle(sends)
    log_start = server_log.stat().st_size

    def send(index: int) -> httpx.Response:
        refused, key = sends[index]
        headers = {"content-type": "application/json", **({"Idempotency-Key": key} if key else {})}
        return broker.post("/brokerbuy", content=refused.sent(), headers=headers)

    responses, _ = burst(send, len(sends))

    for (refused, key), response in zip(sends, responses, strict=True):
        assert response.status_code == refused.status, f"{refused.case} (key {key}): {describe(response)}"
        expect_problem(response, refused.status, refused.code)
    assert "unexpected error" not in server_log.read_bytes()[log_start:].decode(errors="replace")

    # nothing was written: the customer bought nothing, no transaction exists under any of the keys, and
    # the key of a body too large is still free
    assert bought(broker, customer) == 0
    for _, key in sends:
        if key:
            assert_never_created(broker, key)
    key = next(key for refused, key in sends if key and refused.status == 413)
    created = broker.post_json("/brokerbuy", buy_body(customer, 10), {"Idempotency-Key": key})
    assert expect(created, 201)["transaction"]["transactionCode"] == transaction_code_for(
        "demo", "/brokerbuy", key
    )
    assert "idempotent-replayed" not in created.headers
    assert bought(broker, customer) == 10


def test_a_burst_of_oversized_and_malformed_token_requests_is_refused_and_tokens_are_still_issued(
    base_url: str, generated_secrets: dict[str, str]
) -> None:
    form = b"grant_type=client_credentials&client_id=demo-broker&client_secret="
    cases = [
        Refused("a secret over the size limit", form + b"x" * MAX_BODY, 413, "request_too_large"),
        Refused("chunked", form + b"x" * (4 * MAX_BODY), 413, "request_too_large", chunked=True),
        Refused("no grant_type", b"client_id=demo-broker", 422, "validation_failed"),
        Refused("not a form", b"%%%\xff\xfe", 422, "validation_failed"),
    ] * 5

    def send(index: int) -> httpx.Response:
        headers = {"content-type": "application/x-www-form-urlencoded"}
        return httpx.post(
            f"{base_url}/connect/token", content=cases[index].sent(), headers=headers, timeout=60
        )

    responses, _ = burst(send, len(cases))

    for refused, response in zip(cases, responses, strict=True):
        assert response.status_code == refused.status, f"{refused.case}: {describe(response)}"
        expect_problem(response, refused.status, refused.code)
    token = obtain_token(base_url, "demo-broker", generated_secrets["demo-broker"])
    with api_client(base_url, token) as client:
        assert expect(client.get("/prices/EUR"), 200)["currencyCode"] == "EUR"
