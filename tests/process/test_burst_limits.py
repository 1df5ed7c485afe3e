"""Bursts of concurrent requests against the real server process: request size limits hold, malformed bodies
are refused, and nothing is answered with a 5xx.

The bursts go to the session's server with the demo settings (200 requests per second in bursts of 400 per
client and worker), where they are refused for their bodies, not their rate. The rate limits themselves are
tried on a rate-limited server of their own: `tests/servers/test_rate_limits.py`.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx

from interface.idempotency.keys import MAX_BODY, transaction_code_for
from tests.bursts import assert_never_created, bought, burst
from tests.e2e.support import (
    ENCODER,
    Api,
    Customer,
    api_client,
    buy_body,
    describe,
    expect,
    expect_problem,
    obtain_token,
)


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
