"""With the library's recorder (`BROKER_LEDGER_GROUP_COMMIT=off`) there is no group committer for a claim to
ride with: an Idempotency-Key is claimed in a statement of its own before its request runs, answered after,
and replayed. In-process, on an app of this module's own."""

from __future__ import annotations

import uuid

import psycopg
import pytest
from litestar.testing import TestClient

from application.store.database import GROUP_COMMIT_ENV
from tests.e2e.support import AddressSource
from tests.in_process import InProcessClient, in_process_app

client = in_process_app(env={GROUP_COMMIT_ENV: "off"})


@pytest.fixture(scope="module", autouse=True)
def as_the_broker(client: InProcessClient) -> None:
    """Every request of this module's tests is demo-broker's."""
    client.headers.update(client.headers_of("demo-broker"))


def test_a_key_is_claimed_before_its_request_runs_and_its_answer_replayed(
    client: TestClient, database_url: str
):
    assert client.app.state.runtime.idempotency.along_events is None
    code, address = f"library-{uuid.uuid4().hex[:10]}", AddressSource()()
    assert client.post(
        "/customer", json={"customerCode": code, "trustLevel": "Basic", "status": "ACTIVE"}
    ).is_success
    assert client.post(f"/customer/{code}/accounts", json={"customerCryptoAddress": address}).is_success
    body = {
        "customerCode": code,
        "currencyCode": "EUR",
        "cryptoCode": "BTC",
        "fiatValue": 20,
        "destinationAddress": address,
        "paymentMethodCode": "BANK_EUR_BUY",
    }
    key = f"library-{uuid.uuid4().hex}"
    answer = client.post("/brokerbuy", json=body, headers={"Idempotency-Key": key})
    assert answer.status_code == 201, answer.text
    with psycopg.connect(database_url) as conn:
        kept = conn.execute("SELECT state, body FROM api.idempotency_keys WHERE key = %s", [key]).fetchone()
    assert (kept[0], bytes(kept[1])) == ("done", answer.content)
    replay = client.post("/brokerbuy", json=body, headers={"Idempotency-Key": key})
    assert (replay.content, replay.headers["idempotent-replayed"]) == (answer.content, "true")
