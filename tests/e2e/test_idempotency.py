"""`Idempotency-Key` on POST and PUT: replays byte for byte, refuses a reused key, is scoped to the partner.

Whether a second transaction was created is read from the customer's limits: every buy counts its fiatValue
against the day's buy limit, so `used` grows by exactly one buy when exactly one transaction exists.
"""

from __future__ import annotations

import threading
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from decimal import Decimal

import httpx
import pytest

from tests.e2e.support import (
    ENCODER,
    Api,
    Connect,
    Customer,
    active_customer,
    buy_body,
    expect,
    expect_problem,
    limits_used,
    open_limit_windows,
    sell_body,
)

MAX_BODY = 64 * 1024


def new_key() -> str:
    return f"e2e-{uuid.uuid4()}"


def keyed(key: str) -> dict[str, str]:
    return {"Idempotency-Key": key}


def bought_today(api: Api, customer: Customer) -> Decimal:
    return limits_used(api, customer.code)["buy", "daily"]


@pytest.fixture
def buyer(broker: Api, customer: Customer) -> Customer:
    """A customer whose limits can be read (see `open_limit_windows`)."""
    open_limit_windows(broker, customer)
    return customer


def test_the_same_key_and_body_replay_the_first_response_byte_for_byte(broker: Api, buyer: Customer) -> None:
    before = bought_today(broker, buyer)
    key, body = new_key(), buy_body(buyer, 100)

    first = broker.post_json("/brokerbuy", body, keyed(key))
    second = broker.post_json("/brokerbuy", body, keyed(key))
    third = broker.post_json("/brokerbuy", body, keyed(key))

    assert expect(first, 201)["transaction"]["status"] == "Sending"
    assert "idempotent-replayed" not in first.headers
    for replay in (second, third):
        assert replay.status_code == 201
        assert replay.content == first.content
        assert replay.headers["idempotent-replayed"] == "true"
        assert replay.headers["content-type"] == first.headers["content-type"]
    assert bought_today(broker, buyer) - before == Decimal(100)


def test_a_create_without_a_key_is_not_deduplicated(broker: Api, buyer: Customer) -> None:
    before = bought_today(broker, buyer)

    codes = {
        expect(broker.post_json("/brokerbuy", buy_body(buyer, 100)), 201)["transaction"]["transactionCode"]
    }
    codes.add(
        expect(broker.post_json("/brokerbuy", buy_body(buyer, 100)), 201)["transaction"]["transactionCode"]
    )

    assert len(codes) == 2
    assert bought_today(broker, buyer) - before == Decimal(200)


def test_the_same_key_with_another_body_or_path_is_422(broker: Api, buyer: Customer) -> None:
    key, body = new_key(), buy_body(buyer, 100)
    first = broker.post_json("/brokerbuy", body, keyed(key))
    expect(first, 201)

    other_body = broker.post_json("/brokerbuy", buy_body(buyer, 101), keyed(key))
    other_path = broker.post_json("/brokerbuy/simulate", body, keyed(key))

    expect_problem(other_body, 422, "idempotency_key_reused")
    expect_problem(other_path, 422, "idempotency_key_reused")
    assert broker.post_json("/brokerbuy", body, keyed(key)).content == first.content  # still the first


def test_a_refusal_is_replayed_too(broker: Api, buyer: Customer) -> None:
    key, body = new_key(), buy_body(buyer, 5000)  # over the Basic daily limit

    first = broker.post_json("/brokerbuy", body, keyed(key))
    second = broker.post_json("/brokerbuy", body, keyed(key))

    expect_problem(first, 422, "trust_level_limit_exceeded")
    assert second.status_code == 422 and second.content == first.content
    assert second.headers["idempotent-replayed"] == "true"


def test_keys_on_put_and_on_sells_replay_as_well(broker: Api, operator: Api, buyer: Customer) -> None:
    key = new_key()
    body = sell_body(buyer, cryptoAmount=Decimal("0.001"))
    first = broker.post_json("/paymentrequest/brokersell", body, keyed(key))
    again = broker.post_json("/paymentrequest/brokersell", body, keyed(key))
    assert expect(first, 201)["transaction"]["status"] == "Initiated"
    assert again.content == first.content  # one sell, one deposit address

    activation_key = new_key()
    put = broker.put_json(f"/customer/{buyer.code}", {"status": "ACTIVE"}, keyed(activation_key))
    put_again = broker.put_json(f"/customer/{buyer.code}", {"status": "ACTIVE"}, keyed(activation_key))
    assert expect(put, 200)["status"] == "ACTIVE"
    assert put_again.content == put.content and put_again.headers["idempotent-replayed"] == "true"


def test_keys_are_scoped_to_the_partner(broker: Api, other_broker: Api, buyer: Customer) -> None:
    namesake = active_customer(other_broker, buyer.address, code=buyer.code)
    key, body = new_key(), buy_body(buyer, 100)
    assert buy_body(namesake, 100) == body  # the very same request, sent by two partners

    ours = broker.post_json("/brokerbuy", body, keyed(key))
    theirs = other_broker.post_json("/brokerbuy", body, keyed(key))
    theirs_again = other_broker.post_json("/brokerbuy", body, keyed(key))

    our_tx = expect(ours, 201)["transaction"]
    their_tx = expect(theirs, 201)["transaction"]
    assert "idempotent-replayed" not in theirs.headers
    assert their_tx["transactionCode"] != our_tx["transactionCode"]
    assert their_tx["accountCode"] == namesake.account_code != our_tx["accountCode"]
    assert theirs_again.content == theirs.content
    assert broker.post_json("/brokerbuy", body, keyed(key)).content == ours.content


def test_concurrent_requests_with_one_key_create_one_transaction(
    connect: Connect, tokens: dict[str, str], broker: Api, buyer: Customer
) -> None:
    before = bought_today(broker, buyer)
    key, body, parallel = new_key(), buy_body(buyer, 100), 10
    start = threading.Barrier(parallel)

    def send(_: int) -> httpx.Response:
        with connect(tokens["demo-broker"]) as client:
            start.wait()
            return client.post_json("/brokerbuy", body, keyed(key))

    with ThreadPoolExecutor(parallel) as pool:
        responses = list(pool.map(send, range(parallel)))

    assert all(response.status_code < 500 for response in responses), [r.text for r in responses]
    created = [r for r in responses if r.status_code == 201 and "idempotent-replayed" not in r.headers]
    assert len(created) == 1
    for response in responses:
        if response.status_code == 409:
            expect_problem(response, 409, "idempotency_request_in_progress")
        else:
            assert response.status_code == 201 and response.content == created[0].content
    assert Counter(r.status_code for r in responses).keys() <= {201, 409}
    assert bought_today(broker, buyer) - before == Decimal(100)
    assert broker.post_json("/brokerbuy", body, keyed(key)).content == created[0].content


def _padded(body: bytes, size: int) -> bytes:
    """`body` (a JSON object) with whitespace before its closing brace, `size` bytes long."""
    return body[:-1] + b" " * (size - len(body)) + b"}"


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
@pytest.mark.parametrize("key", [None, "fresh"], ids=["without key", "with key"])
def test_a_body_over_64_kib_is_413_and_one_of_64_kib_is_read(
    broker: Api, customer: Customer, chunked: bool, key: str | None
) -> None:
    body = ENCODER.encode(buy_body(customer, 100))
    headers = {"content-type": "application/json", **(keyed(new_key()) if key else {})}

    def send(content: bytes) -> httpx.Response:
        if chunked:
            return broker.post(
                "/brokerbuy/simulate", content=iter([content[:40000], content[40000:]]), headers=headers
            )
        return broker.post("/brokerbuy/simulate", content=content, headers=headers)

    too_large = send(_padded(body, MAX_BODY + 1))
    expect_problem(too_large, 413, "request_too_large")
    if key:
        headers = {**headers, **keyed(new_key())}
    assert expect(send(_padded(body, MAX_BODY)), 200)["transaction"]["status"] == "SIMULATED"


def test_a_replay_still_needs_the_role(broker: Api, auditor: Api, buyer: Customer) -> None:
    key, body = new_key(), buy_body(buyer, 100)
    expect(broker.post_json("/brokerbuy", body, keyed(key)), 201)

    expect_problem(auditor.post_json("/brokerbuy", body, keyed(key)), 403, "forbidden")


@pytest.mark.parametrize("version", [None, "1.1"])
def test_a_replay_still_needs_the_api_version(
    connect: Connect, tokens: dict[str, str], broker: Api, buyer: Customer, version: str | None
) -> None:
    key, body = new_key(), buy_body(buyer, 100)
    expect(broker.post_json("/brokerbuy", body, keyed(key)), 201)

    with connect(tokens["demo-broker"], version=version) as client:
        response = client.post_json("/brokerbuy", body, keyed(key))

    expect_problem(response, 400, "api_version_missing" if version is None else "api_version_unsupported")
