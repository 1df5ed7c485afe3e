"""Over HTTP, a stalled projection is visible and never served as absence: once ReadModels fails on an event,
GET /health answers 503 `projection_stalled` naming it, its position, the log's head and its error, while
GET /health/live still answers 200; and a transaction recorded after that event is read from the event store
(with the presenter of the aggregate path) instead of 404. The real app runs in-process with its projections,
on a database of its own (the stall would otherwise be every other test's)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import pytest
from litestar.testing import TestClient

from interface.shared import transaction_presenters as presenters
from interface.shared.transaction_reading import Reader
from projections.queries import find_transaction
from tests.e2e.support import ENCODER, PROBLEM_JSON, AddressSource, Customer, buy_body, unique_code
from tests.in_process import InProcessClient, in_process_app
from tests.projections.stall_support import insert_unappliable_event


class InProcessApi:
    """`post_json` and `put_json` (exact decimals) on the test client, with one client's headers."""

    def __init__(self, client: TestClient, headers: dict[str, str]) -> None:
        self.client = client
        self.headers = headers

    def get(self, url: str) -> Any:
        return self.client.get(url, headers=self.headers)

    def post_json(self, url: str, payload: Any) -> Any:
        return self.client.post(url, content=ENCODER.encode(payload), headers=self._json())

    def put_json(self, url: str, payload: Any) -> Any:
        return self.client.put(url, content=ENCODER.encode(payload), headers=self._json())

    def _json(self) -> dict[str, str]:
        return {**self.headers, "content-type": "application/json"}


def created(response: Any, status: int = 201) -> dict[str, Any]:
    assert response.status_code == status, response.text
    return response.json()


@dataclass
class Stalled:
    client: TestClient
    broker: InProcessApi
    other: InProcessApi
    bad: int  # the notification id ReadModels cannot apply
    before: dict[str, Any]  # a buy the read models show
    after: dict[str, Any]  # a buy recorded after the bad event, as POST answered it


def wait_for(client: TestClient, path: str, status: int, seconds: float = 30) -> Any:
    deadline = time.monotonic() + seconds
    while True:
        answer = client.get(path)
        if answer.status_code == status or time.monotonic() > deadline:
            return answer
        time.sleep(0.1)


# the app with its projections, on a database of its own: the stall would otherwise be every other test's
client = in_process_app(projections=True, own_database="broker_stall")


@pytest.fixture(scope="module")
def stalled(client: InProcessClient) -> Stalled:
    """A buy the read models show, then an event ReadModels cannot apply, then a buy recorded after it."""
    url = client.database_url
    broker = InProcessApi(client, client.headers_of("demo-broker"))
    other = InProcessApi(client, client.headers_of("other-broker"))
    code = unique_code("stall")
    created(broker.post_json("/customer", {"customerCode": code, "trustLevel": "Basic"}))
    created(broker.put_json(f"/customer/{code}", {"status": "ACTIVE"}), 200)
    address = AddressSource()()
    account = created(broker.post_json(f"/customer/{code}/accounts", {"customerCryptoAddress": address}))
    owner = Customer(code, account["accountCode"], address, account["dcReceiveAddress"])
    before = created(broker.post_json("/brokerbuy", {**buy_body(owner, 100), "stage": True}))
    healthy = wait_for(client, "/health", 200)
    assert healthy.status_code == 200 and healthy.json()["status"] == "ok", healthy.text
    bad = insert_unappliable_event(url)
    after = created(broker.post_json("/brokerbuy", {**buy_body(owner, 50), "stage": True}))
    return Stalled(client, broker, other, bad, before["transaction"], after["transaction"])


def read_models_stalled(client: TestClient, seconds: float = 30) -> Any:
    """GET /health once it names ReadModels stalled (the other projections may fail on the event too)."""
    deadline = time.monotonic() + seconds
    while True:
        answer = client.get("/health")
        named = answer.status_code == 503 and any(
            p["name"] == "ReadModels" and p["error"] for p in answer.json().get("projections", [])
        )
        if named or time.monotonic() > deadline:
            return answer
        time.sleep(0.1)


def test_health_answers_503_projection_stalled_naming_the_projection_its_position_and_error(stalled):
    answer = read_models_stalled(stalled.client)
    assert answer.status_code == 503, answer.text
    assert answer.headers["content-type"].startswith(PROBLEM_JSON)
    problem = answer.json()
    assert problem["code"] == "projection_stalled" and problem["status"] == 503
    assert problem["type"] == "urn:broker-ledger:problem:projection_stalled"
    assert problem["requestId"] == answer.headers["x-request-id"]
    [read_models] = [p for p in problem["projections"] if p["name"] == "ReadModels"]
    assert read_models["stalled"] is True
    assert read_models["position"] == stalled.bad - 1
    assert read_models["head"] > stalled.bad
    error = read_models["error"]
    assert error["notificationId"] == stalled.bad and error["failures"] >= 1
    assert "AttributeError" in error["message"]
    assert any("ReadModels" in line and f"notification {stalled.bad}" in line for line in problem["errors"])


def test_liveness_answers_200_while_readiness_says_stalled(stalled):
    assert wait_for(stalled.client, "/health", 503).status_code == 503
    live = stalled.client.get("/health/live")
    assert live.status_code == 200 and live.json() == {"status": "ok"}


def test_a_transaction_the_read_models_do_not_show_is_read_from_the_event_store(stalled):
    code = stalled.after["transactionCode"]
    answer = stalled.broker.get(f"/transactions/custodian/{code}")
    assert answer.status_code == 200, answer.text
    assert answer.json()["transaction"] == stalled.after  # as the aggregate path presented it


def test_a_transaction_in_neither_the_read_models_nor_the_event_store_is_404(stalled):
    answer = stalled.broker.get("/transactions/custodian/TX0000000000000000")
    assert answer.status_code == 404 and answer.json()["code"] == "transaction_not_found"
    theirs = stalled.other.get(f"/transactions/custodian/{stalled.after['transactionCode']}")
    assert theirs.status_code == 404 and theirs.json()["code"] == "transaction_not_found"


def test_the_read_model_and_the_aggregate_present_a_transaction_alike(stalled):
    code = stalled.before["transactionCode"]
    answer = stalled.broker.get(f"/transactions/custodian/{code}")
    assert answer.status_code == 200, answer.text
    assert answer.json()["transaction"] == stalled.before
    reader: Reader = stalled.client.app.state.runtime.reader
    row = find_transaction(reader.view, "demo", code)
    assert row is not None
    from_row = presenters.transaction_row(reader.ledger.settings, row)
    from_aggregate = presenters.transaction(
        reader.ledger.settings, reader.ledger.store.transaction("demo", code)
    )
    assert from_row == from_aggregate.transaction


def test_a_list_that_would_miss_the_partners_write_after_the_stall_is_503_read_model_behind_at_once(stalled):
    assert read_models_stalled(stalled.client).status_code == 503  # the failure is recorded
    customer = stalled.after["customerCode"]
    started = time.monotonic()
    answer = stalled.broker.get(f"/transactions/custodian?customerCode={customer}")
    elapsed = time.monotonic() - started
    assert answer.status_code == 503, answer.text
    assert answer.headers["content-type"].startswith(PROBLEM_JSON)
    assert answer.json()["code"] == "read_model_behind"
    assert int(answer.headers["Retry-After"]) >= 1
    assert elapsed < 1.0, f"waited {elapsed:.1f} s for a projection known to fail"


def test_a_transaction_read_while_the_projection_fails_is_answered_without_waiting(stalled):
    assert read_models_stalled(stalled.client).status_code == 503
    started = time.monotonic()
    answer = stalled.broker.get(f"/transactions/custodian/{stalled.before['transactionCode']}")
    assert answer.status_code == 200, answer.text
    assert answer.json()["transaction"] == stalled.before
    assert time.monotonic() - started < 1.0


def test_a_partner_whose_writes_the_read_models_hold_still_gets_its_list(stalled):
    answer = stalled.other.get("/transactions/custodian")
    assert answer.status_code == 200, answer.text
    assert answer.json()["total"] == 0


def test_the_reserves_are_503_read_model_behind_while_the_postings_miss_the_partners_last_write(stalled):
    assert read_models_stalled(stalled.client).status_code == 503
    assert wait_for_failure(stalled.client, "Postings")  # the event stops the postings too
    started = time.monotonic()
    answer = stalled.broker.get("/reserves")
    elapsed = time.monotonic() - started
    assert answer.status_code == 503, answer.text
    assert answer.headers["content-type"].startswith(PROBLEM_JSON)
    assert answer.json()["code"] == "read_model_behind"
    assert "ledger postings" in answer.json()["detail"]
    assert int(answer.headers["Retry-After"]) >= 1
    assert elapsed < 1.0, f"waited {elapsed:.1f} s for a projection known to fail"


def test_a_partner_whose_writes_the_postings_hold_still_gets_the_reserves(stalled):
    answer = stalled.other.get("/reserves")
    assert answer.status_code == 200, answer.text
    assert answer.json()["cryptoReserves"]


def wait_for_failure(client: TestClient, projection: str, seconds: float = 10) -> bool:
    """Whether GET /health names `projection` with an error within `seconds`."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        listed = client.get("/health").json().get("projections", [])
        if any(p["name"] == projection and p["error"] for p in listed):
            return True
        time.sleep(0.1)
    return False
