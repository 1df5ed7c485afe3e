"""A broker platform's outage, caught up from the events feed: a real server process whose callbacks go to
the platform's receiver on a local HTTP server; the platform reads the feed and keeps its last cursor; then
its receiver is killed (its port closed: the callbacks find no one), changes are made, the service itself is
killed with SIGKILL and started again, and the platform, back, reads the feed from its last cursor: it gets
every change it missed exactly once, in the log's order, and nothing it had seen before, each change with
the id of the callback it missed."""

from __future__ import annotations

from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import pytest

from tests.databases import scratch_database
from tests.e2e.support import (
    AddressSource,
    Api,
    active_customer,
    buy_body,
    deposit_report,
    expect,
    local_callback_settings,
    sell_body,
    unique_code,
)
from tests.processes import ApiServer, running_server
from tests.receivers import Receiver, receiving, wait_until

SERVER_ENV = {
    "BROKER_LEDGER_CALLBACK_TIMEOUT_SECONDS": "0.5",
    "BROKER_LEDGER_CALLBACK_RETRY_BASE_SECONDS": "0.05",
    "BROKER_LEDGER_CALLBACK_RETRY_CAP_SECONDS": "0.4",
    "BROKER_LEDGER_CALLBACK_POLL_SECONDS": "0.05",
}


@pytest.fixture(scope="module")
def server(database_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApiServer]:
    root = tmp_path_factory.mktemp("feed")
    settings = root / "settings.toml"
    settings.write_text(local_callback_settings())
    with (
        scratch_database(database_url, "broker_feed") as database,
        running_server(
            database, root / "var", root / "server.log", workers=1, settings=settings, env=SERVER_ENV
        ) as started,
    ):
        yield started


class Platform:
    """The broker platform: its requests, and what it has read of the feed (its last cursor)."""

    def __init__(self, broker: Api, operator: Api) -> None:
        self.broker, self.operator = broker, operator
        self.cursor: str | None = None
        self.seen: list[dict[str, Any]] = []

    def catch_up(self) -> list[dict[str, Any]]:
        """Reads the feed from its last cursor until `hasMore` is false, in small pages; the changes read."""
        read = []
        while True:
            query = "?limit=3" + (f"&after={self.cursor}" if self.cursor else "")
            page = expect(self.broker.get(f"/events{query}"), 200)
            read += page["data"]
            self.cursor = page["nextCursor"]
            if not page["hasMore"]:
                self.seen += read
                return read

    def buy(self, customer: Any, url: str, stage: bool = False) -> str:
        body = buy_body(customer, 20, callbackUrl=url, stage=stage)
        return expect(self.broker.post_json("/brokerbuy", body), 201)["transaction"]["transactionCode"]

    def sendout(self, code: str, confirmations: int) -> None:
        body = {"transactionCode": code, "txId": f"out-{code}", "confirmations": confirmations}
        expect(self.operator.post_json("/chain/sendouts", body), 200)

    def deliveries(self, code: str) -> list[dict[str, Any]]:
        return expect(self.broker.get(f"/transactions/custodian/{code}/callbacks"), 200)["deliveries"]


def code_of(change: dict[str, Any]) -> str:
    subject = change.get("transaction") or change["customer"]
    return subject.get("transactionCode") or subject["customerCode"]


def shown(changes: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [
        (code_of(change), (change.get("transaction") or change["customer"])["status"]) for change in changes
    ]


def test_a_platform_back_from_an_outage_reads_every_change_it_missed_once_in_order(
    server: ApiServer, addresses: AddressSource
) -> None:
    with server.client("demo-broker") as broker, server.client("demo-operator") as operator:
        platform = Platform(broker, operator)
        with receiving(Receiver(), url_host="localhost") as receiver:
            url = receiver.url
            alice = active_customer(broker, addresses(), "Plus")
            before = platform.buy(alice, url)  # Sending: delivered before the outage
            assert wait_until(lambda: receiver.delivered_ids(), timeout=30)
            platform.catch_up()
        # the receiver is gone: every callback from now on fails, and the platform reads nothing meanwhile
        platform.sendout(before, 2)  # COMPLETED
        staged = platform.buy(alice, url, stage=True)
        expect(broker.post_json(f"/transactions/custodian/{staged}/commit", {}), 200)
        platform.sendout(staged, 1)  # too few confirmations: no change
        sell = expect(
            broker.post_json(
                "/paymentrequest/brokersell", sell_body(alice, cryptoAmount=Decimal("0.001"), callbackUrl=url)
            ),
            201,
        )["transaction"]
        expect(operator.post_json("/chain/deposits", deposit_report(sell, 2)), 200)
        carol = unique_code("carol")
        expect(broker.post_json("/customer", {"customerCode": carol, "trustLevel": "Basic"}), 201)
        expect(broker.put_json(f"/customer/{carol}", {"status": "ACTIVE"}), 200)
    server.kill()
    server.start()
    with server.client("demo-broker") as broker, server.client("demo-operator") as operator:
        platform.broker, platform.operator = broker, operator
        missed = platform.catch_up()
        assert shown(missed) == [
            (before, "COMPLETED"),
            (staged, "Staged"),
            (staged, "Sending"),
            (sell["transactionCode"], "Initiated"),
            (sell["transactionCode"], "ToPayout"),
            (carol, "NEW"),
            (carol, "ACTIVE"),
        ]
        everything = Platform(broker, operator).catch_up()  # the database is this module's alone
        assert everything == platform.seen  # before and after the outage: each change once, in order
        assert len({change["id"] for change in everything}) == len(everything)
        for code in (before, staged, sell["transactionCode"]):
            ids = [change["id"] for change in everything if code_of(change) == code]
            assert ids == [delivery["eventId"] for delivery in platform.deliveries(code)]
        assert platform.catch_up() == []  # at the head: nothing more
