"""End-to-end fixtures: the real app in-process for the tests of this package, and a client per role.

The app is `create_app(build_runtime(...))` with the demo settings and its projections running, on the
session's database, with its var directory in tmp (generated client secrets and token signing key), served
through litestar's test client: every HTTP behaviour is tested on it without a server process. `connect`
makes an `Api` client on it; tokens come from the real OAuth2 endpoint with the secrets the app wrote to
`<var>/client-secrets.txt`. What needs a real process (sockets, signals, workers, the server's log) is in
`tests/process/`, whose conftest gives the same fixtures on a real `broker-ledger serve`.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from bench.clock import MiddayClock
from tests.e2e.support import (
    API_VERSION,
    CLIENTS,
    ROOT,
    AddressSource,
    Api,
    Connect,
    Customer,
    active_customer,
    api_client,
    client_secrets,
    obtain_token,
    signing_key,
)
from tests.in_process import AppTransport, InProcessClient, in_process_app

# The real app in-process, its projections running (stopped when the package ends), on the real date from
# midday, so that no test's history straddles a midnight (scripts/test-calendar runs some at 23:59:50).
app = in_process_app(scope="package", projections=True, clock=MiddayClock())


@pytest.fixture(scope="package")
def server_var(app: InProcessClient) -> Path:
    """The var directory of the app under test: its generated client secrets and token signing key."""
    return app.var


@pytest.fixture(scope="package")
def connect(app: InProcessClient) -> Connect:
    """A new `Api` client of the in-process app (any number, from any thread): `connect(token, version)`."""
    transport = AppTransport(app)

    def make(token: str | None = None, version: str | None = API_VERSION) -> Api:
        return api_client(str(app.base_url), token, version, transport=transport)

    return make


@pytest.fixture(scope="package")
def generated_secrets(connect: Connect, server_var: Path) -> dict[str, str]:
    found = client_secrets(server_var)
    assert set(CLIENTS) <= found.keys(), f"client-secrets.txt lacks some of {CLIENTS}"
    return found


@pytest.fixture(scope="package")
def token_signing_key(connect: Connect, server_var: Path) -> bytes:
    return signing_key(server_var)


@pytest.fixture(scope="package")
def tokens(connect: Connect, generated_secrets: dict[str, str]) -> dict[str, str]:
    with connect(version=None) as anonymous:
        return {client: obtain_token(anonymous, client, generated_secrets[client]) for client in CLIENTS}


def _client(connect: Connect, token: str) -> Iterator[Api]:
    with connect(token) as client:
        yield client


@pytest.fixture(scope="package")
def broker(connect: Connect, tokens: dict[str, str]) -> Iterator[Api]:
    yield from _client(connect, tokens["demo-broker"])


@pytest.fixture(scope="package")
def operator(connect: Connect, tokens: dict[str, str]) -> Iterator[Api]:
    yield from _client(connect, tokens["demo-operator"])


@pytest.fixture(scope="package")
def auditor(connect: Connect, tokens: dict[str, str]) -> Iterator[Api]:
    yield from _client(connect, tokens["demo-auditor"])


@pytest.fixture(scope="package")
def other_broker(connect: Connect, tokens: dict[str, str]) -> Iterator[Api]:
    yield from _client(connect, tokens["other-broker"])


@pytest.fixture(scope="package")
def other_operator(connect: Connect, tokens: dict[str, str]) -> Iterator[Api]:
    yield from _client(connect, tokens["other-operator"])


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


@pytest.fixture(scope="package")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The project built as a wheel, once for the package's tests of what it carries."""
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out), str(ROOT)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    (built,) = out.glob("broker_ledger-*.whl")
    return built
