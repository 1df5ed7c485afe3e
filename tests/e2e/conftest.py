"""End-to-end fixtures: one real server process for the tests of this package (stopped when they end, so its
connections are free for the rest of the suite), on a fresh database, and a client per role.

The server is `broker-ledger serve --workers 2` with the demo settings, its var directory in tmp (generated
client secrets and token signing key) and DATABASE_URL set to the session's fresh database. Tokens come from
the real OAuth2 endpoint with the secrets the server wrote to `<var>/client-secrets.txt`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.e2e.support import (
    CLIENTS,
    AddressSource,
    Api,
    Customer,
    active_customer,
    api_client,
    client_secrets,
    obtain_token,
    running_server,
    signing_key,
)


@pytest.fixture(scope="package")
def server_var(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("e2e-server") / "var"


@pytest.fixture(scope="package")
def server_log(server_var: Path) -> Path:
    return server_var.parent / "server.log"


@pytest.fixture(scope="package")
def base_url(database_url: str, server_var: Path, server_log: Path) -> Iterator[str]:
    with running_server(database_url, server_var, server_log, workers=2) as url:
        yield url


@pytest.fixture(scope="package")
def generated_secrets(base_url: str, server_var: Path) -> dict[str, str]:
    found = client_secrets(server_var)
    assert set(CLIENTS) <= found.keys(), f"client-secrets.txt lacks some of {CLIENTS}"
    return found


@pytest.fixture(scope="package")
def token_signing_key(base_url: str, server_var: Path) -> bytes:
    return signing_key(server_var)


@pytest.fixture(scope="package")
def tokens(base_url: str, generated_secrets: dict[str, str]) -> dict[str, str]:
    return {
        client_id: obtain_token(base_url, client_id, generated_secrets[client_id]) for client_id in CLIENTS
    }


def _client(base_url: str, token: str) -> Iterator[Api]:
    with api_client(base_url, token) as client:
        yield client


@pytest.fixture(scope="package")
def broker(base_url: str, tokens: dict[str, str]) -> Iterator[Api]:
    yield from _client(base_url, tokens["demo-broker"])


@pytest.fixture(scope="package")
def operator(base_url: str, tokens: dict[str, str]) -> Iterator[Api]:
    yield from _client(base_url, tokens["demo-operator"])


@pytest.fixture(scope="package")
def auditor(base_url: str, tokens: dict[str, str]) -> Iterator[Api]:
    yield from _client(base_url, tokens["demo-auditor"])


@pytest.fixture(scope="package")
def other_broker(base_url: str, tokens: dict[str, str]) -> Iterator[Api]:
    yield from _client(base_url, tokens["other-broker"])


@pytest.fixture(scope="package")
def other_operator(base_url: str, tokens: dict[str, str]) -> Iterator[Api]:
    yield from _client(base_url, tokens["other-operator"])


@pytest.fixture(scope="package")
def addresses() -> AddressSource:
    return AddressSource()


@pytest.fixture
def make_customer(broker: Api, addresses: AddressSource) -> Callable[..., Customer]:
    """Registers an ACTIVE customer with a unique code and a BTC account (demo-broker unless told)."""

    def make(api: Api = broker, trust_level: str = "Basic", code: str | None = None) -> Customer:
        return active_customer(api, addresses(), trust_level, code)

    return make


@pytest.fixture
def customer(make_customer: Callable[..., Customer]) -> Customer:
    """A fresh ACTIVE Basic customer of partner demo with a BTC account."""
    return make_customer()
