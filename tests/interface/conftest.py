"""The real app in-process for a module's tests (`tests/in_process.py`): one app per module, its clients'
headers, one ACTIVE customer with a BTC account. A module that needs other settings or a clock declares its
own app with `in_process_app(...)` under the same name, `client`."""

from __future__ import annotations

import uuid

import pytest

from tests.e2e.support import AddressSource
from tests.in_process import InProcessClient, in_process_app

client = in_process_app()


@pytest.fixture(scope="module")
def broker(client: InProcessClient) -> dict[str, str]:
    return client.headers_of("demo-broker")


@pytest.fixture(scope="module")
def operator(client: InProcessClient) -> dict[str, str]:
    return client.headers_of("demo-operator")


@pytest.fixture(scope="module")
def customer(client: InProcessClient, broker: dict[str, str]) -> dict[str, str]:
    """An ACTIVE customer with a BTC account: its code, account code and wallet address."""
    code = f"in-process-{uuid.uuid4().hex[:10]}"
    body = {"customerCode": code, "trustLevel": "Basic", "status": "ACTIVE"}
    assert client.post("/customer", json=body, headers=broker).status_code == 201
    address = AddressSource()()
    opened = client.post(
        f"/customer/{code}/accounts", json={"customerCryptoAddress": address}, headers=broker
    )
    assert opened.status_code == 201, opened.text
    return {"code": code, "account": opened.json()["accountCode"], "address": address}
