"""Callbacks over HTTP, as a broker platform sees them: a real server process whose settings allow-list
`localhost` for plain http, receivers on local HTTP servers, signatures checked with `standardwebhooks`.

- A flaky receiver (30 % of requests fail, some stall past the 0.5 s timeout) gets every status change of
  many transactions at least once, in order per transaction, each correctly signed.
- The server killed with SIGKILL in the middle of delivering, and started again, loses nothing.
- Hostile callback URLs are refused with 422, and a listener on 127.0.0.1 (not allow-listed: only the name
  `localhost` is) receives no connection.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import pytest

from tests.databases import scratch_database
from tests.e2e.support import (
    AddressSource,
    Api,
    Customer,
    active_customer,
    buy_body,
    expect,
    expect_problem,
    local_callback_settings,
    sell_body,
)
from tests.processes import ApiServer, running_server
from tests.receivers import Listener, Receiver, flaky, receiving, wait_until
from tests.unit.test_callback_urls import HOSTILE

SERVER_ENV = {
    "BROKER_LEDGER_CALLBACK_TIMEOUT_SECONDS": "0.5",
    "BROKER_LEDGER_CALLBACK_RETRY_BASE_SECONDS": "0.05",
    "BROKER_LEDGER_CALLBACK_RETRY_CAP_SECONDS": "0.4",
    "BROKER_LEDGER_CALLBACK_POLL_SECONDS": "0.05",
    "BROKER_LEDGER_CALLBACK_SENDERS": "3",
    # the hostile URLs' ~100 lookups in a burst: a query the resolver drops is asked again after 1 s, not
    # glibc's 5 s (resolv.conf's `options`, for this process)
    "RES_OPTIONS": "timeout:1 attempts:3",
}


@pytest.fixture(scope="module")
def server(database_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApiServer]:
    """A one-worker server with the callback settings on a database of its own; killed and started again
    by the last test, and stopped with SIGTERM (exit code 0) at the end."""
    root = tmp_path_factory.mktemp("callbacks")
    settings = root / "settings.toml"
    settings.write_text(local_callback_settings())
    with (
        scratch_database(database_url, "broker_cb") as database,
        running_server(
            database, root / "var", root / "server.log", workers=1, settings=settings, env=SERVER_ENV
        ) as started,
    ):
        yield started


def callback_secret(server: ApiServer, partner: str = "demo") -> str:
    return json.loads((server.var / "credentials.json").read_text())["callback_secrets"][partner]


@pytest.fixture
def broker(server: ApiServer) -> Iterator[Api]:
    with server.client("demo-broker") as client:
        yield client


@pytest.fixture
def operator(server: ApiServer) -> Iterator[Api]:
    with server.client("demo-operator") as client:
        yield client


class Flow:
    """Buys with a callback URL, each moved on to COMPLETED: three status changes apiece."""

    def __init__(self, broker: Api, operator: Api, addresses: AddressSource) -> None:
        self.broker, self.operator, self.addresses = broker, operator, addresses
        self.customer: Customer | None = None

    def buys(self, count: int, url: str) -> list[str]:
        self.customer = self.customer or active_customer(self.broker, self.addresses(), "Plus")
        codes = []
        for _ in range(count):
            created = expect(
                self.broker.post_json("/brokerbuy", buy_body(self.customer, 20, callbackUrl=url)), 201
            )
            codes.append(created["transaction"]["transactionCode"])
        for code in codes:
            sendout = {"transactionCode": code, "txId": f"out-{code}", "confirmations": 2}
            assert expect(self.operator.post_json("/chain/sendouts", sendout), 200)["transaction"][
                "status"
            ] == ("COMPLETED")
        return codes


def listing(api: Api, code: str) -> list[dict[str, Any]]:
    return expect(api.get(f"/transactions/custodian/{code}/callbacks"), 200)["deliveries"]


# A buy created without `stage` is Sending from its first event: its statuses as callbacks see them.
STATUSES = ["Sending", "COMPLETED"]


def all_finished(api: Api, codes: list[str], expected: int = len(STATUSES)) -> bool:
    for code in codes:
        deliveries = listing(api, code)
        if len(deliveries) < expected or any(d["status"] == "pending" for d in deliveries):
            return False
    return True


def check_received(receiver: Receiver, api: Api, codes: list[str], secret: str) -> int:
    """Every delivery listed for `codes` reached the receiver with a 2xx, in order per transaction, and every
    request the receiver got is correctly signed; the number of requests received."""
    order = {}
    for code in codes:
        deliveries = listing(api, code)
        assert [d["status"] for d in deliveries] == ["delivered"] * len(STATUSES), deliveries
        assert [d["transactionStatus"] for d in deliveries] == STATUSES
        order.update({d["eventId"]: (code, d["sequence"]) for d in deliveries})
    done = dict.fromkeys(codes, 0)
    received = receiver.snapshot()
    for item in received:
        body = item.verified(secret)
        assert body["id"] == item.event_id and body["type"] == "transaction.status_changed"
        code, number = order[item.event_id]
        assert body["transaction"]["transactionCode"] == code
        assert number <= done[code] + 1, (
            f"{code}: delivery {number} arrived before {done[code] + 1} was taken"
        )
        if item.ok:
            done[code] = max(done[code], number)
    assert done == dict.fromkeys(codes, len(STATUSES))
    assert receiver.delivered_ids() == set(order)
    return len(received)


def test_a_flaky_receiver_gets_every_event_in_order_and_signed(
    server: ApiServer, broker: Api, operator: Api, addresses: AddressSource
) -> None:
    flow = Flow(broker, operator, addresses)
    with receiving(Receiver(flaky(0.3, 0.05), stall_seconds=1.0), url_host="localhost") as receiver:
        codes = flow.buys(12, receiver.url)
        assert wait_until(lambda: all_finished(broker, codes), timeout=90, interval=0.5), server.tail()
    requests = check_received(receiver, broker, codes, callback_secret(server))
    assert requests > len(codes) * len(STATUSES)  # some were refused or stalled, and sent again
    attempts = [a for code in codes for d in listing(broker, code) for a in d["attempts"]]
    assert {a["outcome"] for a in attempts} == {"delivered", "failed"}
    assert all(a["responseCode"] is not None or a["error"].startswith("no answer") for a in attempts)


@pytest.mark.slow
def test_a_flaky_receiver_gets_every_event_of_many_transactions(
    server: ApiServer, broker: Api, operator: Api, addresses: AddressSource
) -> None:
    flow = Flow(broker, operator, addresses)
    with receiving(Receiver(flaky(0.3, 0.05, seed=11), stall_seconds=1.0), url_host="localhost") as receiver:
        codes = flow.buys(80, receiver.url)
        assert wait_until(lambda: all_finished(broker, codes), timeout=300, interval=1), server.tail()
    check_received(receiver, broker, codes, callback_secret(server))


def test_hostile_callback_urls_are_refused_and_a_local_listener_gets_no_connection(
    broker: Api, server: ApiServer, addresses: AddressSource
) -> None:
    customer = active_customer(broker, addresses(), "Plus")
    with Listener() as listener:
        port = listener.port
        aimed_at_listener = [
            f"http://127.0.0.1:{port}/cb",
            f"https://127.0.0.1:{port}/cb",
            f"https://2130706433:{port}/cb",
            f"https://0177.0.0.1:{port}/cb",
            f"https://0x7f000001:{port}/cb",
            f"https://127.1:{port}/cb",
            f"https://[::ffff:127.0.0.1]:{port}/cb",
            f"http://[::1]:{port}/cb",
            f"https://localhost.localdomain:{port}/cb",
            f"https://user@localhost:{port}/cb",
        ]
        allowed_here = ("https://localhost/cb", "https://LOCALHOST./cb")  # localhost is allow-listed here
        corpus = aimed_at_listener + [url for url in HOSTILE if len(url) <= 2048 and url not in allowed_here]
        assert len(corpus) >= 40
        for url in corpus:
            for path, body in (
                ("/brokerbuy", buy_body(customer, 20, callbackUrl=url)),
                (
                    "/paymentrequest/brokersell",
                    sell_body(customer, cryptoAmount=Decimal("0.0002"), callbackUrl=url),
                ),
            ):
                expect_problem(broker.post_json(path, body), 422, "callback_url_refused")
        too_long = "https://hooks.partner.example/" + "x" * 2100
        expect_problem(broker.post_json("/brokerbuy", buy_body(customer, 20, callbackUrl=too_long)), 422)
        time.sleep(0.5)  # time enough for a delivery attempt to reach the listener (senders poll every 50 ms)
    assert listener.connections == 0


def test_the_callbacks_of_a_transaction_are_listed_for_its_partner_only(
    server: ApiServer, broker: Api, operator: Api, addresses: AddressSource
) -> None:
    with receiving(
        Receiver(lambda event_id, seen: 500 if seen == 0 else None), url_host="localhost"
    ) as receiver:
        code = Flow(broker, operator, addresses).buys(1, receiver.url)[0]
        assert wait_until(lambda: all_finished(broker, [code]), timeout=60, interval=0.3)
    deliveries = listing(broker, code)
    first = deliveries[0]
    assert first["sequence"] == 1 and first["type"] == "transaction.status_changed"
    assert first["url"] == receiver.url and first["status"] == "delivered" and first["responseCode"] == 204
    assert [(a["number"], a["outcome"], a["responseCode"]) for a in first["attempts"]] == [
        (1, "failed", 500),
        (2, "delivered", 204),
    ]
    assert first["nextAttemptAt"] is None and first["finishedAt"] is not None
    with server.client("demo-auditor") as auditor:
        assert listing(auditor, code) == deliveries
    expect_problem(operator.get(f"/transactions/custodian/{code}/callbacks"), 403)
    with server.client("other-broker") as other:
        expect_problem(other.get(f"/transactions/custodian/{code}/callbacks"), 404, "transaction_not_found")
    expect_problem(broker.get("/transactions/custodian/NOPE/callbacks"), 404, "transaction_not_found")


def test_killing_the_server_while_it_delivers_loses_nothing(
    server: ApiServer, addresses: AddressSource
) -> None:
    """Runs last: it kills the module's server (SIGKILL, no shutdown at all) and starts it again."""
    slow_and_flaky = flaky(0.3, 0.0, seed=5)

    def answer(event_id: str, seen: int) -> int | None:
        time.sleep(0.05)
        return slow_and_flaky(event_id, seen)

    with receiving(Receiver(answer), url_host="localhost") as receiver:
        with server.client("demo-broker") as broker, server.client("demo-operator") as operator:
            codes = Flow(broker, operator, addresses).buys(15, receiver.url)
        assert wait_until(lambda: len(receiver.delivered_ids()) >= 8, timeout=60, interval=0.05)
        server.kill()
        assert len(receiver.delivered_ids()) < len(codes) * len(STATUSES), (
            "everything was delivered before the kill: kill sooner"
        )
        server.start()
        with server.client("demo-broker") as broker:
            assert wait_until(lambda: all_finished(broker, codes), timeout=120, interval=0.5), server.tail()
            check_received(receiver, broker, codes, callback_secret(server))
