"""The real app in-process: `create_app` on a runtime wired to the session's database, with a var directory
of its own (generated client secrets, token key), served through litestar's test client."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from litestar.testing import TestClient
from litestar.testing.transport import TestClientTransport

from application.credentials import VAR_ENV
from application.settings import SETTINGS_ENV
from application.store.database import CONNECTIONS_ENV, DEFAULT_CONNECTIONS
from interface.app import build_runtime, create_app
from tests.e2e.support import client_secrets


@contextmanager
def app_client(database_url: str, var: Path, projections: bool = False) -> Iterator[TestClient]:
    """The app with the demo settings; its projections run in-process only with `projections`."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(VAR_ENV, str(var))
        if not projections:
            patch.setenv("BROKER_LEDGER_PROJECTIONS", "off")
        patch.delenv(SETTINGS_ENV, raising=False)
        # one connection fewer than serve's default (the read models get 1): xdist workers share the budget
        patch.setenv(CONNECTIONS_ENV, str(DEFAULT_CONNECTIONS - 1))
        app = create_app(build_runtime(database_url))
        with TestClient(app, raise_server_exceptions=False, timeout=60) as client:
            yield client


class _RawHeaders(TestClientTransport):
    """litestar's transport, passing the request's header lines as sent: one entry per line and the bytes
    themselves (its own joins a repeated header into one "a, b" value, which no server does)."""

    def parse_request(self, request: httpx.Request) -> dict[str, Any]:
        scope = super().parse_request(request)  # takes the host header out of `request.headers`
        host = scope["headers"][0]
        scope["headers"] = [host, *((name.lower(), value) for name, value in request.headers.raw)]
        return scope


class AppTransport(httpx.BaseTransport):
    """The app behind a test client as an httpx transport: any number of clients
    (`httpx.Client(transport=...)`, from any thread) send their requests to it, and closing one of them leaves
    the app running."""

    def __init__(self, client: TestClient) -> None:
        self._app = _RawHeaders(client=client, raise_server_exceptions=False)

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        return self._app.handle_request(request)


def bearer_headers(client: TestClient, var: Path, client_id: str, version: str = "1.2") -> dict[str, str]:
    """Headers of a request by `client_id`: a token from POST /connect/token, and `api_version`."""
    secret = client_secrets(var)[client_id]
    answer = client.post(
        "/connect/token",
        data={"grant_type": "client_credentials", "client_id": client_id, "client_secret": secret},
    )
    assert answer.status_code == 200, answer.text
    return {"Authorization": f"Bearer {answer.json()['access_token']}", "api_version": version}
