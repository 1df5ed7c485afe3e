"""A keyed buy whose commit landed while the connection carrying it was lost (a failover, a restart of the
database): the group committer finds its events by reading them back, but the claim of its Idempotency-Key
that rode in the same transaction returned nothing the request could keep. The buy is never answered 201
then: it is 503 `database_unavailable` with Retry-After of a lease, and the retry of the same key, once the
lease has lapsed, answers the buy that was made, and only that one."""

from __future__ import annotations

import time
import uuid
from typing import Any

import psycopg

from application.store.group_commit.recorder import GroupCommitRecorder
from interface.idempotency import keys as idempotency
from interface.idempotency import middleware as idempotent_requests
from tests.e2e.support import PROBLEM_JSON, AddressSource, active_customer, api_client, buy_body
from tests.in_process import AppTransport, InProcessClient, in_process_app
from tests.resilience.load import transactions_in_store

LEASE = 1  # seconds, for the test: 10 in service

client = in_process_app(
    scope="function",
    own_database="lost_commit",
    patches=[(idempotency, "LEASE_SECONDS", LEASE), (idempotent_requests, "LEASE_SECONDS", LEASE)],
)


def lose_the_next_connection_after_its_commit(monkeypatch: Any) -> None:
    """The next batch carrying statements commits, and its connection is lost before their rows come back."""
    original = GroupCommitRecorder._write_together
    lost: list[bool] = []

    def write(self: GroupCommitRecorder, conn: Any, batch: list[Any]) -> Any:
        written = original(self, conn, batch)
        if not lost and any(save.statements for save in batch):
            lost.append(True)
            for save in batch:  # the server committed; its answers never came back
                save.rows = []
            raise psycopg.OperationalError("server closed the connection unexpectedly")
        return written

    monkeypatch.setattr(GroupCommitRecorder, "_write_together", write)


def test_a_keyed_buy_whose_commit_landed_as_its_connection_was_lost_is_503_and_its_retry_answers_it_once(
    client: InProcessClient, monkeypatch: Any
) -> None:
    token = client.headers_of("demo-broker")["Authorization"].split()[1]
    with api_client("http://testserver", token, transport=AppTransport(client)) as broker:
        customer = active_customer(broker, AddressSource()(), "Plus")
        key = {"Idempotency-Key": f"lost-{uuid.uuid4().hex}"}
        body = buy_body(customer, 25)
        lose_the_next_connection_after_its_commit(monkeypatch)

        first = broker.post_json("/brokerbuy", body, headers=key)
        assert first.status_code == 503, first.text
        assert first.headers["content-type"].startswith(PROBLEM_JSON)
        assert first.json()["code"] == "database_unavailable"
        assert first.headers["retry-after"] == str(LEASE)

        time.sleep(LEASE + 0.5)
        retried = broker.post_json("/brokerbuy", body, headers=key)
        assert retried.status_code == 201, retried.text
        again = broker.post_json("/brokerbuy", body, headers=key)
        assert again.headers.get("idempotent-replayed") == "true"
    code = retried.json()["transaction"]["transactionCode"]
    assert again.json()["transaction"]["transactionCode"] == code
    made = transactions_in_store(client.database_url, [customer])
    assert list(made.values()) == [1], "one buy, created once, in the event store"
