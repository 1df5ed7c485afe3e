"""The callbacks a broker manages (issue 39, item 2), over HTTP on the real app in-process with its
projections and delivery worker, a database of its own and real receivers on loopback:

- `GET /callbacks?status=&from=&to=` lists the partner's deliveries across its transactions, each attempt with
  its time and answer, and the next attempt's time while one is pending;
- `POST /callbacks/{eventId}/redeliver` sends one again now, once per Idempotency-Key, and is 404 for another
  partner's delivery;
- `POST /callbacks/secret/rotate` (operator) shows a new secret once; until the previous one is retired
  (`DELETE /callbacks/secret/previous`) every callback carries both signatures, each verifiable with its
  secret by Standard Webhooks;
- the roles: brokers and operators redeliver, auditors only read, only operators rotate and retire.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

import pytest
from standardwebhooks import Webhook
from standardwebhooks.webhooks import WebhookVerificationError

from tests.e2e.support import AddressSource, Customer, buy_body, local_callback_settings, unique_code
from tests.in_process import InProcessClient, RoleCalls, in_process_app
from tests.receivers import Received, Receiver, receiving, wait_until

ENV = {
    "BROKER_LEDGER_CALLBACK_TIMEOUT_SECONDS": "1",
    "BROKER_LEDGER_CALLBACK_RETRY_BASE_SECONDS": "0.6",
    "BROKER_LEDGER_CALLBACK_RETRY_CAP_SECONDS": "1",
    "BROKER_LEDGER_CALLBACK_RETRY_WINDOW_SECONDS": "2.5",
    "BROKER_LEDGER_CALLBACK_POLL_SECONDS": "0.05",
    "BROKER_LEDGER_CALLBACK_SENDERS": "2",
}
client = in_process_app(
    projections=True, own_database="broker_callbacks_api", settings=local_callback_settings(), env=ENV
)
ROLES = {
    "broker": "demo-broker",
    "operator": "demo-operator",
    "auditor": "demo-auditor",
    "other": "other-broker",
    "other-operator": "other-operator",
}


class Switch:
    """A receiver's answer: 503 while down, else 204."""

    def __init__(self) -> None:
        self.down = threading.Event()

    def __call__(self, event_id: str, seen: int) -> int | None:
        return 503 if self.down.is_set() else None


class Desk(RoleCalls):
    def customer(self, broker: str, addresses: AddressSource) -> Customer:
        code = unique_code("cbm")
        self.call(broker, "POST", "/customer", {"customerCode": code, "trustLevel": "Plus"})
        self.call(broker, "PUT", f"/customer/{code}", {"status": "ACTIVE"})
        address = addresses()
        account = self.call(broker, "POST", f"/customer/{code}/accounts", {"customerCryptoAddress": address})
        return Customer(code, account["accountCode"], address, "")

    def buy(self, broker: str, customer: Customer, url: str) -> str:
        created = self.call(broker, "POST", "/brokerbuy", buy_body(customer, 20, callbackUrl=url))
        return created["transaction"]["transactionCode"]

    def listed(self, role: str, query: str = "") -> list[dict[str, Any]]:
        return self.call(role, "GET", f"/callbacks?pageSize=200{query}")["records"]

    def of(self, role: str, code: str, query: str = "") -> list[dict[str, Any]]:
        return [record for record in self.listed(role, query) if record["transactionCode"] == code]

    def answer(self, role: str, method: str, path: str, **headers: str) -> Any:
        return self.client.request(method, path, headers=self.headers[role] | headers)


@pytest.fixture(scope="module")
def desk(client: InProcessClient) -> Desk:
    return Desk(client, {role: client.headers_of(name) for role, name in ROLES.items()})


@pytest.fixture(scope="module")
def switch() -> Switch:
    return Switch()


@pytest.fixture(scope="module")
def receiver(switch: Switch) -> Iterator[Receiver]:
    with receiving(Receiver(switch), url_host="localhost") as serving:
        yield serving


@pytest.fixture(scope="module")
def customer(desk: Desk) -> Customer:
    return desk.customer("broker", AddressSource())


@pytest.fixture(scope="module")
def failed(desk: Desk, switch: Switch, receiver: Receiver, customer: Customer) -> dict[str, Any]:
    """A buy whose every delivery failed while its receiver was down (then up again): the first of them."""
    switch.down.set()
    code = desk.buy("broker", customer, receiver.url)
    assert wait_until(lambda: _all(desk.of("broker", code), "failed"), 30), desk.of("broker", code)
    switch.down.clear()
    return min(desk.of("broker", code), key=lambda record: record["sequence"])


def _all(records: list[dict[str, Any]], status: str) -> bool:
    return bool(records) and all(record["status"] == status for record in records)


def _at(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def _iso(at: datetime) -> str:
    return at.isoformat().replace("+00:00", "Z")


def _received(receiver: Receiver, event_id: str) -> list[Received]:
    return [item for item in receiver.snapshot() if item.event_id == event_id]


def configured_secret(client: InProcessClient, partner: str = "demo") -> str:
    return json.loads((client.var / "credentials.json").read_text())["callback_secrets"][partner]


def test_a_pending_delivery_shows_each_attempt_and_when_the_next_one_is_due(
    desk: Desk, switch: Switch, receiver: Receiver, customer: Customer
) -> None:
    switch.down.set()
    try:
        code = desk.buy("broker", customer, receiver.url)

        def retried() -> list[dict[str, Any]]:
            return [r for r in desk.of("broker", code, "&status=pending") if r["attempts"]]

        assert wait_until(lambda: bool(retried()), 10), desk.of("broker", code)
        record = retried()[0]
        last = record["attempts"][-1]
        assert (last["outcome"], last["responseCode"], last["error"]) == ("failed", 503, "HTTP 503")
        assert record["url"] == receiver.url and record["type"] == "transaction.status_changed"
        assert record["nextAttemptAt"] is not None and _at(record["nextAttemptAt"]) >= _at(last["at"])
        assert record["finishedAt"] is None
    finally:
        switch.down.clear()


def test_failed_deliveries_are_listed_by_status_and_time_across_the_partners_transactions(
    desk: Desk, failed: dict[str, Any]
) -> None:
    failed_ones = desk.listed("broker", "&status=failed")
    assert failed["eventId"] in {record["eventId"] for record in failed_ones}
    assert all(record["status"] == "failed" and record["nextAttemptAt"] is None for record in failed_ones)
    assert failed["attempts"] and all(a["responseCode"] == 503 for a in failed["attempts"])
    assert failed["eventId"] not in {r["eventId"] for r in desk.listed("broker", "&status=delivered")}
    created = _at(failed["created"])
    within = f"&from={_iso(created)}&to={_iso(created + timedelta(microseconds=1))}"
    assert failed["eventId"] in {r["eventId"] for r in desk.listed("broker", within)}
    after = f"&from={_iso(created + timedelta(microseconds=1))}"
    assert failed["eventId"] not in {r["eventId"] for r in desk.listed("broker", after)}
    before = f"&to={_iso(created)}"
    assert failed["eventId"] not in {r["eventId"] for r in desk.listed("broker", before)}
    assert failed["eventId"] in {r["eventId"] for r in desk.listed("auditor", "&status=failed")}
    assert failed["eventId"] in {r["eventId"] for r in desk.listed("operator", "&status=failed")}
    assert failed["eventId"] not in {r["eventId"] for r in desk.listed("other")}


def test_a_page_says_its_total_and_the_list_refuses_what_it_does_not_know(desk: Desk) -> None:
    page = desk.call("broker", "GET", "/callbacks?page=1&pageSize=1")
    assert page["page"] == 1 and page["pageSize"] == 1 and len(page["records"]) <= 1
    assert page["totalPages"] == page["total"]
    empty = desk.call("broker", "GET", "/callbacks?from=2001-01-01T00:00:00Z&to=2001-01-02T00:00:00Z")
    assert empty == {"page": 1, "pageSize": 50, "total": 0, "totalPages": 0, "records": []}
    for query in ("status=lost", "from=yesterday", "colour=blue"):
        answer = desk.answer("broker", "GET", f"/callbacks?{query}")
        assert answer.status_code == 400, answer.text


def test_a_failed_delivery_redelivered_is_sent_again_now_once_per_idempotency_key(
    desk: Desk, receiver: Receiver, failed: dict[str, Any]
) -> None:
    event_id = failed["eventId"]
    before = len(_received(receiver, event_id))
    path = f"/callbacks/{event_id}/redeliver"
    first = desk.answer("broker", "POST", path, **{"Idempotency-Key": f"again-{event_id}"})
    assert first.status_code == 202, first.text
    assert first.json()["eventId"] == event_id and first.json()["status"] in ("pending", "delivered")

    def delivered() -> bool:
        return any(r["status"] == "delivered" for r in desk.listed("broker") if r["eventId"] == event_id)

    assert wait_until(delivered, 10)
    sent = _received(receiver, event_id)
    assert len(sent) == before + 1 and sent[-1].ok
    assert sent[-1].payload["id"] == event_id and sent[-1].headers["Webhook-Id"] == event_id
    replay = desk.answer("broker", "POST", path, **{"Idempotency-Key": f"again-{event_id}"})
    assert (replay.status_code, replay.json()) == (202, first.json())
    time.sleep(0.5)  # the worker polls every 0.05 s: a second sending would have happened by now
    assert len(_received(receiver, event_id)) == before + 1
    listed = next(r for r in desk.listed("broker") if r["eventId"] == event_id)
    assert listed["status"] == "delivered" and listed["attempts"][-1]["responseCode"] == 204
    by_operator = desk.answer("operator", "POST", path, **{"Idempotency-Key": f"operator-{event_id}"})
    assert by_operator.status_code == 202, by_operator.text
    assert wait_until(lambda: len(_received(receiver, event_id)) == before + 2, 10)


def test_another_partners_delivery_or_an_unknown_one_is_not_found(desk: Desk, failed: dict[str, Any]) -> None:
    for role, event_id in (("other", failed["eventId"]), ("other-operator", failed["eventId"])):
        answer = desk.answer(role, "POST", f"/callbacks/{event_id}/redeliver")
        assert answer.status_code == 404, answer.text
        assert answer.json()["code"] == "callback_not_found"
    unknown = desk.answer("broker", "POST", "/callbacks/evt_00000000000000000000000000000000/redeliver")
    assert (unknown.status_code, unknown.json()["code"]) == (404, "callback_not_found")


def test_each_role_may_do_only_its_part(desk: Desk, failed: dict[str, Any]) -> None:
    redeliver = f"/callbacks/{failed['eventId']}/redeliver"
    refused = [
        ("auditor", "POST", redeliver),
        ("broker", "POST", "/callbacks/secret/rotate"),
        ("auditor", "POST", "/callbacks/secret/rotate"),
        ("broker", "DELETE", "/callbacks/secret/previous"),
        ("auditor", "DELETE", "/callbacks/secret/previous"),
    ]
    for role, method, path in refused:
        answer = desk.answer(role, method, path)
        assert (answer.status_code, answer.json()["code"]) == (403, "forbidden"), (role, method, path)
    assert desk.answer("auditor", "GET", "/callbacks").status_code == 200


def signatures(received: Received) -> list[str]:
    return received.headers["Webhook-Signature"].split(" ")


def test_a_rotated_secret_signs_beside_the_previous_one_until_it_is_retired(
    client: InProcessClient, desk: Desk, receiver: Receiver, customer: Customer
) -> None:
    old = configured_secret(client)
    keyed = desk.answer("operator", "POST", "/callbacks/secret/rotate", **{"Idempotency-Key": "rotate-1"})
    assert (keyed.status_code, keyed.json()["code"]) == (400, "idempotency_key_not_accepted")
    rotated = desk.call("operator", "POST", "/callbacks/secret/rotate", status=201)
    new = rotated["secret"]
    assert new.startswith("whsec_") and new != old
    overlap = _at(rotated["previousUntil"]) - _at(rotated["rotatedAt"])
    assert overlap == timedelta(hours=24)

    during = _received_after(desk, receiver, customer)
    assert len(signatures(during)) == 2
    assert during.verified(new)["id"] == during.event_id
    assert during.verified(old)["id"] == during.event_id

    retired = desk.call("operator", "DELETE", "/callbacks/secret/previous")
    assert retired == {"rotatedAt": rotated["rotatedAt"], "previousUntil": None}
    after = _received_after(desk, receiver, customer)
    assert len(signatures(after)) == 1
    assert after.verified(new)["id"] == after.event_id
    with pytest.raises(WebhookVerificationError):
        after.verified(old)
    # the other partner's callbacks are signed as before: a rotation is the partner's own
    assert desk.call("other-operator", "DELETE", "/callbacks/secret/previous") == {
        "rotatedAt": None,
        "previousUntil": None,
    }


def test_a_second_rotation_makes_the_first_rotated_secret_the_previous_one(
    client: InProcessClient, desk: Desk, receiver: Receiver, customer: Customer
) -> None:
    first = desk.call("operator", "POST", "/callbacks/secret/rotate", status=201)["secret"]
    second = desk.call("operator", "POST", "/callbacks/secret/rotate", status=201)["secret"]
    received = _received_after(desk, receiver, customer)
    assert len(signatures(received)) == 2
    Webhook(second).verify(received.body, received.headers)
    Webhook(first).verify(received.body, received.headers)
    with pytest.raises(WebhookVerificationError):
        Webhook(configured_secret(client)).verify(received.body, received.headers)


def _received_after(desk: Desk, receiver: Receiver, customer: Customer) -> Received:
    """The first callback of a new buy, as the receiver got it (delivered)."""
    code = desk.buy("broker", customer, receiver.url)

    def first_delivered() -> list[dict[str, Any]]:
        return [r for r in desk.of("broker", code, "&status=delivered") if r["sequence"] == 1]

    assert wait_until(lambda: bool(first_delivered()), 10), desk.of("broker", code)
    received = _received(receiver, first_delivered()[0]["eventId"])
    assert received and received[-1].ok
    return received[-1]
