"""What the end-to-end tests share: HTTP clients per role, exact JSON, problem checks, a server's credentials.

The tests talk HTTP to the real app as a broker platform would: in-process through litestar's test client
(an `Api` on its transport, see `tests/e2e/conftest.py`), or, for what needs a process (`tests/process/`),
to a real `broker-ledger serve` over a socket (started by `tests/processes.py`). Request bodies are encoded
with decimals as JSON numbers and responses are parsed with `parse_float=Decimal`, so amounts are compared
exactly, never as floats.
"""

from __future__ import annotations

import base64
import itertools
import json
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any, Protocol

import httpx
import msgspec

from application.adapters.addresses import Bip32AddressBook
from application.settings import DEFAULT_SETTINGS, load_settings

ROOT = Path(__file__).resolve().parents[2]
API_VERSION = "1.2"
PROBLEM_JSON = "application/problem+json"
CLIENTS = ("demo-broker", "demo-operator", "demo-auditor", "other-broker", "other-operator")
PROBLEM_MEMBERS = {"type", "title", "status", "detail", "code", "errors"}
FIRST_CUSTOMER_ADDRESS_INDEX = 5000  # the service hands out its deposit addresses from index 0 up

CENT = Decimal("0.01")
SATOSHI = Decimal("0.00000001")
ENCODER = msgspec.json.Encoder(decimal_format="number")


# --- settings and credentials of a server --------------------------------------------------------------


def local_callback_settings() -> str:
    """The demo settings' text with `localhost` allowed as a plain-http callback host (for test receivers)."""
    text = DEFAULT_SETTINGS.read_text()
    assert "callback_http_hosts = []" in text
    return text.replace("callback_http_hosts = []", 'callback_http_hosts = ["localhost"]')


def client_secrets(var: Path) -> dict[str, str]:
    """The generated client secrets, `client_id=secret` per line; a client's last line wins."""
    found: dict[str, str] = {}
    for line in (var / "client-secrets.txt").read_text().splitlines():
        client_id, separator, secret = line.partition("=")
        if separator:
            found[client_id.strip()] = secret.strip()
    return found


def signing_key(var: Path) -> bytes:
    stored = json.loads((var / "credentials.json").read_text())
    return base64.b64decode(stored["signing_key"])


class PostsForms(Protocol):
    """What `obtain_token` needs of a client: an httpx-like `post` of a form to a path of the app."""

    def post(self, url: str, *, data: dict[str, str], timeout: float) -> Any: ...


def obtain_token(server: str | PostsForms, client_id: str, secret: str) -> str:
    """The one way the tests get a token: POST /connect/token of `server` with the client's credentials, as a
    platform does. `server` is a base URL, or a client whose paths are relative to the app's (an httpx client,
    litestar's test client of the in-process app, or Schemathesis' ASGI session)."""
    form = {"grant_type": "client_credentials", "client_id": client_id, "client_secret": secret}
    if isinstance(server, str):
        response = httpx.post(f"{server}/connect/token", data=form, timeout=30)
    else:
        response = server.post("/connect/token", data=form, timeout=30)
    assert response.status_code == 200, f"{client_id} got no token: {response.status_code} {response.text}"
    return response.json()["access_token"]


def token_headers(token: str | None, version: str | None = API_VERSION) -> dict[str, str]:
    """The headers of a request with the bearer `token` and `api_version` (either left out when None)."""
    headers = {}
    if version is not None:
        headers["api_version"] = version
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    return headers


# --- HTTP clients and JSON ------------------------------------------------------------------------------


class Api(httpx.Client):
    """A client of one role: base URL, `api_version` and bearer token set; JSON bodies with exact decimals."""

    def send_json(
        self, method: str, url: str, payload: Any = None, headers: dict[str, str] | None = None
    ) -> httpx.Response:
        content = None if payload is None else ENCODER.encode(payload)
        sent = {"content-type": "application/json"} if content is not None else {}
        sent.update(headers or {})
        return self.request(method, url, content=content, headers=sent)

    def post_json(
        self, url: str, payload: Any = None, headers: dict[str, str] | None = None
    ) -> httpx.Response:
        return self.send_json("POST", url, payload, headers)

    def put_json(
        self, url: str, payload: Any = None, headers: dict[str, str] | None = None
    ) -> httpx.Response:
        return self.send_json("PUT", url, payload, headers)


def api_client(
    base_url: str,
    token: str | None = None,
    version: str | None = API_VERSION,
    transport: httpx.BaseTransport | None = None,
) -> Api:
    """A client of `base_url` (over the network, or through `transport`, e.g. the in-process app's)."""
    return Api(base_url=base_url, headers=token_headers(token, version), timeout=60, transport=transport)


Connect = Callable[..., Api]  # connect(token=None, version=API_VERSION): a new client of the app under test


def loads(response: httpx.Response) -> Any:
    return json.loads(response.text, parse_float=Decimal)


def describe(response: httpx.Response) -> str:
    request = response.request
    sent = request.content.decode(errors="replace")[:500] if request.content else ""
    return (
        f"{request.method} {request.url.path} {sent}\n-> {response.status_code} "
        f"{response.headers.get('content-type')}\n{response.text[:2000]}"
    )


def expect(response: httpx.Response, status: int) -> Any:
    """The parsed body of a response that must have `status`."""
    assert response.status_code == status, describe(response)
    assert response.headers["content-type"].startswith("application/json"), describe(response)
    return loads(response)


def expect_problem(response: httpx.Response, status: int, code: str | None = None) -> dict[str, Any]:
    """An RFC 9457 problem with `status` (and `code`), one error line at least, and no stack trace."""
    assert response.status_code == status, describe(response)
    assert response.headers["content-type"].startswith(PROBLEM_JSON), describe(response)
    problem = loads(response)
    assert problem.keys() >= PROBLEM_MEMBERS, describe(response)
    assert problem["status"] == status
    assert problem["type"] == f"urn:broker-ledger:problem:{problem['code']}"
    assert problem["errors"], describe(response)
    assert all(isinstance(line, str) and line for line in problem["errors"])
    assert "Traceback" not in response.text
    if code is not None:
        assert problem["code"] == code, describe(response)
    return problem


def is_number(value: object) -> bool:
    """A JSON number as parsed by `loads`: Decimal with a fraction, int without (never str or bool)."""
    return isinstance(value, Decimal | int) and not isinstance(value, bool)


# --- customers, accounts, limits -----------------------------------------------------------------------


class AddressSource:
    """Valid BTC customer addresses, a new one per call: derived from the demo key at 5000 and up."""

    def __init__(self) -> None:
        self._book = Bip32AddressBook(load_settings(DEFAULT_SETTINGS).cryptos)
        self._indexes = itertools.count(FIRST_CUSTOMER_ADDRESS_INDEX)
        self._lock = threading.Lock()

    def __call__(self) -> str:
        with self._lock:
            index = next(self._indexes)
        return self._book.derive("BTC", index).address


@dataclass(frozen=True)
class Customer:
    code: str
    account_code: str
    address: str  # the customer's own wallet (withdraw address)
    receive_address: str  # the service's deposit address of the account


def unique_code(prefix: str = "e2e") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


def active_customer(api: Api, address: str, trust_level: str = "Basic", code: str | None = None) -> Customer:
    """Registers a customer (NEW), activates it, and opens the account of its BTC wallet `address`."""
    code = code or unique_code()
    created = expect(api.post_json("/customer", {"customerCode": code, "trustLevel": trust_level}), 201)
    assert created["status"] == "NEW"
    assert expect(api.put_json(f"/customer/{code}", {"status": "ACTIVE"}), 200)["status"] == "ACTIVE"
    account = expect(api.post_json(f"/customer/{code}/accounts", {"customerCryptoAddress": address}), 201)
    assert account["dcCode"] == "BTC"
    return Customer(code, account["accountCode"], address, account["dcReceiveAddress"])


def buy_body(customer: Customer, fiat_value: Decimal | int | str = 100, **changes: Any) -> dict[str, Any]:
    body = {
        "customerCode": customer.code,
        "currencyCode": "EUR",
        "cryptoCode": "BTC",
        "fiatValue": Decimal(fiat_value),
        "destinationAddress": customer.address,
        "paymentMethodCode": "BANK_EUR_BUY",
    }
    body.update(changes)
    return {key: value for key, value in body.items() if value is not None}


def sell_body(customer: Customer, **amounts: Any) -> dict[str, Any]:
    body = {
        "customerCode": customer.code,
        "accountCode": customer.account_code,
        "currencyCode": "EUR",
        "cryptoCode": "BTC",
        "paymentMethodCode": "BANK_EUR_SELL",
    }
    body.update(amounts)
    return {key: value for key, value in body.items() if value is not None}


def deposit_report(
    tx: dict[str, Any], confirmations: int, amount: Decimal | float | None = None, tx_id: str = ""
) -> dict[str, Any]:
    """A chain report of the deposit into sell `tx`'s address: by default its whole crypto amount, under
    txId `dep-<code>`."""
    return {
        "cryptoCode": "BTC",
        "address": tx["destinationCryptoAddress"],
        "txId": tx_id or f"dep-{tx['transactionCode']}",
        "cryptoAmount": tx["executedAmounts"]["cryptoAmount"] if amount is None else amount,
        "confirmations": confirmations,
    }


def confirmed_sell(broker: Api, operator: Api, customer: Customer, tx_prefix: str) -> dict[str, Any]:
    """A sell of 0.001 BTC from the customer's account, its deposit (txId `<tx_prefix>-<code>`) confirmed."""
    body = {"accountCode": customer.account_code, "paymentMethodCode": "BANK_EUR_SELL", "cryptoAmount": 0.001}
    sell = expect(broker.post_json("/sell/broker", body), 201)["transaction"]
    deposit = deposit_report(sell, 6, tx_id=f"{tx_prefix}-{sell['transactionCode']}")
    return expect(operator.post_json("/chain/deposits", deposit), 200)["transaction"]


def open_limit_windows(api: Api, customer: Customer) -> None:
    """A small buy and a small sell, so that both directions of the customer's limits are in use before a
    test compares what is used before and after."""
    expect(api.post_json("/brokerbuy", buy_body(customer, 10)), 201)
    expect(
        api.post_json("/paymentrequest/brokersell", sell_body(customer, cryptoAmount=Decimal("0.0002"))), 201
    )


def limits_used(api: Api, customer_code: str) -> dict[tuple[str, str], Decimal]:
    """Used volume per (direction, period), from GET /customer/{code}/limits."""
    limits = expect(api.get(f"/customer/{customer_code}/limits"), 200)
    used = {}
    for entry in limits["limits"]:
        assert is_number(entry["used"]) and is_number(entry["limit"]) and is_number(entry["remaining"])
        assert entry["remaining"] == max(entry["limit"] - entry["used"], 0)
        used[entry["direction"], entry["period"]] = Decimal(entry["used"])
    return used
