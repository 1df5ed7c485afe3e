"""The real app in-process: `create_app` on a runtime wired to the session's database, with a var directory
of its own (generated client secrets, token key), served through litestar's test client.

`in_process_app` is the one fixture of it: a module (or a package, or each test) declares the app it needs in
one line, e.g. `client = in_process_app(projections=True)` or `client = in_process_app(clock=CLOCK)`, and its
tests take the fixture by that name. `app_client` builds the app; `app_environment` is what it is built in.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import httpx
import pytest
from litestar import Litestar
from litestar.testing import TestClient
from litestar.testing.transport import TestClientTransport

from application.credentials import VAR_ENV
from application.ports import Clock
from application.settings import SETTINGS_ENV
from application.store.database import CONNECTIONS_ENV, DEFAULT_CONNECTIONS
from interface.app import PROJECTIONS_ENV, build_runtime, create_app
from tests.databases import scratch_database
from tests.e2e.support import (
    API_VERSION,
    ENCODER,
    Customer,
    client_secrets,
    obtain_token,
    token_headers,
)

Patch = tuple[object, str, object]  # (target, attribute, value): set while the app lives, as monkeypatch does
Scope = Literal["function", "module", "package", "session"]


class InProcessClient(TestClient):
    """litestar's test client of the app in-process, which knows the app's var directory (the generated client
    secrets) and database, so that a test gets a client's headers in one call."""

    def __init__(self, app: Litestar, var: Path, database_url: str) -> None:
        super().__init__(app, raise_server_exceptions=False, timeout=60)
        self.var = var
        self.database_url = database_url

    def headers_of(self, client_id: str, version: str | None = API_VERSION) -> dict[str, str]:
        """Headers of a request by `client_id`: a token from POST /connect/token, and `api_version`."""
        token = obtain_token(self, client_id, client_secrets(self.var)[client_id])
        return token_headers(token, version)


@contextlib.contextmanager
def app_environment(
    var: Path,
    *,
    projections: bool = False,
    env: Mapping[str, str] | None = None,
    settings: str | None = None,
    patches: Sequence[Patch] = (),
) -> Iterator[None]:
    """The environment an app in-process is built and runs in, undone at the end: `var` its var directory;
    its projections only with `projections`; the demo settings, or a settings file of the text `settings`;
    one connection fewer than serve's default (xdist workers share the suite's budget); `env` and `patches`
    on top."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(VAR_ENV, str(var))
        if not projections:
            patch.setenv(PROJECTIONS_ENV, "off")
        if settings is None:
            patch.delenv(SETTINGS_ENV, raising=False)
        else:
            var.parent.mkdir(parents=True, exist_ok=True)
            (var.parent / "settings.toml").write_text(settings)
            patch.setenv(SETTINGS_ENV, str(var.parent / "settings.toml"))
        patch.setenv(CONNECTIONS_ENV, str(DEFAULT_CONNECTIONS - 1))  # the read models get 1
        for name, value in (env or {}).items():
            patch.setenv(name, value)
        for target, attribute, value in patches:
            patch.setattr(target, attribute, value)
        yield


@contextlib.contextmanager
def app_client(
    database_url: str, var: Path, *, clock: Clock | None = None, **environment: Any
) -> Iterator[InProcessClient]:
    """The app on `database_url`, in `app_environment(var, **environment)`, its test client open (its
    lifespan started); `clock` sets the ledger's time only (tokens keep the real one)."""
    with app_environment(var, **environment):
        app = create_app(build_runtime(database_url, ledger_clock=clock))
        with InProcessClient(app, var, database_url) as client:
            yield client


def in_process_app(
    *,
    scope: Scope = "module",
    own_database: str | None = None,
    after: Sequence[str] = (),
    projections: bool = False,
    clock: Clock | None = None,
    env: Mapping[str, str] | None = None,
    settings: str | None = None,
    patches: Sequence[Patch] = (),
) -> Callable[..., Iterator[InProcessClient]]:
    """The fixture of an app in-process (an `InProcessClient`) for each `scope`: on the session's database, or
    on a database of its own named `<own_database>_<random>`; built after the fixtures named in `after` are
    set up (a profiler that must see the app's threads start); the other options are `app_client`'s. Assign
    it to the name the tests ask for: `client = in_process_app(...)` in a module or a conftest."""

    def app(
        database_url: str, tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
    ) -> Iterator[InProcessClient]:
        for name in after:
            request.getfixturevalue(name)
        var = tmp_path_factory.mktemp("in-process") / "var"
        with contextlib.ExitStack() as stack:
            url = database_url
            if own_database is not None:
                url = stack.enter_context(scratch_database(database_url, own_database))
            options = {"projections": projections, "env": env, "settings": settings, "patches": patches}
            yield stack.enter_context(app_client(url, var, clock=clock, **options))

    return pytest.fixture(scope=scope)(app)


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


@dataclass
class RoleCalls:
    """Requests to an app in-process as its roles: `headers` of each role (`InProcessClient.headers_of`),
    bodies encoded with decimals as JSON numbers, the answer's status checked (any 2xx by default)."""

    client: InProcessClient
    headers: dict[str, dict[str, str]] = field(default_factory=dict)

    def call(self, role: str, method: str, path: str, body: Any = None, status: int | None = None) -> Any:
        content = None if body is None else ENCODER.encode(body)
        headers = self.headers[role] | ({"content-type": "application/json"} if content else {})
        answer = self.client.request(method, path, content=content, headers=headers)
        if status is None:
            assert answer.status_code < 300, answer.text
        else:
            assert answer.status_code == status, answer.text
        return answer.json()

    def active_customer(self, role: str, code: str, address: str) -> Customer:
        """Registers customer `code` as `role` (Basic), activates it, and opens the account of `address`."""
        self.call(role, "POST", "/customer", {"customerCode": code, "trustLevel": "Basic"})
        self.call(role, "PUT", f"/customer/{code}", {"status": "ACTIVE"})
        account = self.call(role, "POST", f"/customer/{code}/accounts", {"customerCryptoAddress": address})
        return Customer(code, account["accountCode"], address, account["dcReceiveAddress"])
