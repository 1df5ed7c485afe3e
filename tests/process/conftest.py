"""Fixtures of the tests that need a real process: one `broker-ledger serve --workers 2` for this folder (the
demo settings, its var directory in tmp, DATABASE_URL the session's database), stopped with SIGTERM when the
folder's tests end, so its connections are free for the rest of the suite.

`connect` gives clients of that server over the network, so the role clients, tokens and customers of
`tests/e2e/conftest.py` work here unchanged; `base_url` and `server_log` are for what only a process has
(raw sockets, curl, the server's own log, its workers).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from application.store.database import CONNECTIONS_ENV, MIN_CONNECTIONS

# The role clients and customers of tests/e2e, here on this package's server (a package-scoped fixture is
# cached per package that holds it, so these are this server's own).
from tests.e2e.conftest import (  # noqa: F401
    addresses,
    auditor,
    broker,
    customer,
    generated_secrets,
    make_customer,
    operator,
    other_broker,
    other_operator,
    token_signing_key,
    tokens,
)
from tests.e2e.support import API_VERSION, Api, Connect, api_client
from tests.processes import running_server


@pytest.fixture(scope="package")
def server_var(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("e2e-server") / "var"


@pytest.fixture(scope="package")
def server_log(server_var: Path) -> Path:
    return server_var.parent / "server.log"


@pytest.fixture(scope="package")
def base_url(database_url: str, server_var: Path, server_log: Path) -> Iterator[str]:
    # the smallest pools serve allows: other process tests start their own servers while this one runs
    budget = {CONNECTIONS_ENV: str(MIN_CONNECTIONS)}
    with running_server(database_url, server_var, server_log, workers=2, env=budget) as server:
        yield server.base_url


@pytest.fixture(scope="package")
def connect(base_url: str) -> Connect:
    """A new `Api` client of the server process: `connect(token, version)`."""

    def make(token: str | None = None, version: str | None = API_VERSION) -> Api:
        return api_client(base_url, token, version)

    return make
