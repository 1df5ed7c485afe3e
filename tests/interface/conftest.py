"""The real app in-process for a module's tests: one app, its clients' headers, one ACTIVE customer with a BTC
account. A module that needs other settings or a clock defines fixtures of its own."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from litestar.testing import TestClient

from tests.e2e.support import AddressSource
from tests.in_process import app_client, bearer_headers


@pytest.fixture(scope="module")
def var(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("in-process") / "var"


@pytest.fixture(scope="module")
def client(database_url: str, var: Path) -> Iterator[TestClient]:
    with app_client(database_url, var) as test_client:
        yield test_client


@pytest.fixture(scope="module")
def broker(client: TestClient, var: Path) -> dict[str, str]:
    return bearer_headers(client, var, "demo-broker")


@pytest.fixture(scope="module")
def operator(client: TestClient, var: Path) -> dict[str, str]:
    return bearer_headers(client, var, "demo-operator")


@pytest.fixture(scope="module")
def customer(client: TestClient, broker: dict[str, str]) -> dict[str, str]:
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
