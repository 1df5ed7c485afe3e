"""Who may call what: bearer tokens, roles, api_version, the token endpoint, and partner isolation.

Bad tokens are minted with PyJWT and the server's real signing key (from `<var>/credentials.json`), so that
each one is wrong in the tested way only; a token minted the same way with nothing changed is accepted.
"""

from __future__ import annotations

import secrets
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import httpx
import jwt
import pytest

from tests.e2e.support import (
    Api,
    Connect,
    Customer,
    active_customer,
    buy_body,
    expect,
    expect_problem,
    loads,
    sell_body,
)

AUDIENCE = "broker-ledger-api"
DROP = object()


def mint(claims: dict[str, Any], key: bytes | None, algorithm: str = "HS256", **changes: Any) -> str:
    minted = {**claims, "jti": secrets.token_urlsafe(16)}
    for name, value in changes.items():
        if value is DROP:
            minted.pop(name)
        else:
            minted[name] = value
    return jwt.encode(minted, key, algorithm=algorithm)


def _bearer(token: str) -> str:
    return f"Bearer {token}"


def _hour_ago() -> dict[str, int]:
    now = int(time.time())
    return {"iat": now - 7200, "exp": now - 3600}


def _tomorrow() -> dict[str, int]:
    now = int(time.time())
    return {"iat": now + 86400, "exp": now + 90000}


BAD_AUTHORIZATIONS: dict[str, Callable[[dict[str, Any], bytes], str | None]] = {
    "no Authorization header": lambda claims, key: None,
    "Bearer without a token": lambda claims, key: "Bearer",
    "garbage": lambda claims, key: "Bearer garbage",
    "three garbage segments": lambda claims, key: "Bearer aaa.bbb.ccc",
    "Basic credentials": lambda claims, key: "Basic ZGVtby1icm9rZXI6c2VjcmV0",
    "token without Bearer": lambda claims, key: mint(claims, key),
    "expired": lambda claims, key: _bearer(mint(claims, key, **_hour_ago())),
    "wrong signature": lambda claims, key: _bearer(mint(claims, secrets.token_bytes(32))),
    "wrong audience": lambda claims, key: _bearer(mint(claims, key, aud="someone-else")),
    "wrong issuer": lambda claims, key: _bearer(mint(claims, key, iss="evil-issuer")),
    "alg none": lambda claims, key: _bearer(mint(claims, None, algorithm="none")),
    "HS512 with the real key": lambda claims, key: _bearer(mint(claims, key, algorithm="HS512")),
    "no exp claim": lambda claims, key: _bearer(mint(claims, key, exp=DROP)),
    "no partner claim": lambda claims, key: _bearer(mint(claims, key, partner=DROP)),
    "issued in the future": lambda claims, key: _bearer(mint(claims, key, **_tomorrow())),
    "not valid before tomorrow": lambda claims, key: _bearer(mint(claims, key, nbf=int(time.time()) + 86400)),
    "roles not a list": lambda claims, key: _bearer(mint(claims, key, roles="broker")),
}
PROTECTED_ROUTES = [("GET", "/prices/EUR"), ("POST", "/brokerbuy"), ("PUT", "/customer/someone")]


@pytest.fixture(scope="module")
def broker_claims(tokens: dict[str, str], token_signing_key: bytes) -> dict[str, Any]:
    """The claims of a real demo-broker token, to be copied with one of them spoiled."""
    return jwt.decode(tokens["demo-broker"], token_signing_key, algorithms=["HS256"], audience=AUDIENCE)


@pytest.fixture(scope="module")
def anonymous(connect: Connect) -> Iterator[Api]:
    """A client of the app that sends no token and no api_version of its own."""
    with connect(version=None) as client:
        yield client


def call(client: Api, method: str, path: str, authorization: str | None, **headers: str) -> httpx.Response:
    sent = {"api_version": "1.2", **headers}
    if authorization is not None:
        sent["Authorization"] = authorization
    body = b"{}" if method != "GET" else None
    return client.request(method, path, headers=sent, content=body)


@pytest.mark.filterwarnings("ignore::jwt.warnings.InsecureKeyLengthWarning")
@pytest.mark.parametrize(("method", "path"), PROTECTED_ROUTES)
@pytest.mark.parametrize("case", list(BAD_AUTHORIZATIONS))
def test_a_bad_token_is_401_with_www_authenticate(
    anonymous: Api,
    broker_claims: dict[str, Any],
    token_signing_key: bytes,
    case: str,
    method: str,
    path: str,
) -> None:
    authorization = BAD_AUTHORIZATIONS[case](broker_claims, token_signing_key)

    response = call(anonymous, method, path, authorization)

    expect_problem(response, 401, "unauthorized")
    assert response.headers["www-authenticate"].startswith("Bearer"), response.headers


def test_a_token_minted_like_the_bad_ones_but_unspoiled_is_accepted(
    anonymous: Api, broker_claims: dict[str, Any], token_signing_key: bytes
) -> None:
    response = call(anonymous, "GET", "/prices/EUR", _bearer(mint(broker_claims, token_signing_key)))

    assert expect(response, 200)["currencyCode"] == "EUR"


def test_a_bad_token_is_401_before_a_missing_api_version_is_noticed(connect: Connect) -> None:
    with connect(version=None) as client:
        response = client.get("/prices/EUR", headers={"Authorization": "Bearer garbage"})

    expect_problem(response, 401, "unauthorized")


WRONG_ROLES = [
    ("demo-auditor", "GET", "/prices/EUR"),
    ("demo-auditor", "POST", "/customer"),
    ("demo-auditor", "POST", "/brokerbuy"),
    ("demo-operator", "POST", "/customer"),
    ("demo-operator", "POST", "/brokerbuy/simulate"),
    ("demo-operator", "POST", "/paymentrequest/brokersell"),
    ("demo-operator", "POST", "/transactions/custodian/TX1/commit"),
    ("demo-broker", "POST", "/chain/deposits"),
    ("demo-broker", "POST", "/chain/sendouts"),
    ("demo-broker", "PUT", "/transactions/custodian/TX1/payoutconfirming"),
    ("demo-broker", "PUT", "/transactions/custodian/TX1/payout"),
    ("other-broker", "PUT", "/transactions/custodian/TX1/payout"),
]


@pytest.mark.parametrize(("client_id", "method", "path"), WRONG_ROLES)
def test_a_valid_token_without_the_role_is_403(
    anonymous: Api, tokens: dict[str, str], client_id: str, method: str, path: str
) -> None:
    response = call(anonymous, method, path, _bearer(tokens[client_id]))

    problem = expect_problem(response, 403, "forbidden")
    assert client_id in problem["detail"]


@pytest.mark.parametrize(("method", "path"), [*PROTECTED_ROUTES, ("POST", "/brokerbuy/simulate")])
def test_a_missing_api_version_is_400(
    connect: Connect, tokens: dict[str, str], method: str, path: str
) -> None:
    with connect(version=None) as client:
        headers = {"Authorization": _bearer(tokens["demo-broker"]), "content-type": "application/json"}
        response = client.request(method, path, headers=headers, content=b"{}" if method != "GET" else None)

    problem = expect_problem(response, 400, "api_version_missing")
    assert "1.2" in problem["detail"]


@pytest.mark.parametrize(
    ("version", "path"),
    [("1.1", "/brokerbuy"), ("1.1", "/brokerbuy/simulate"), ("2.0", "/brokerbuy"), ("1.20", "/customer")],
)
def test_an_unsupported_api_version_is_400_naming_the_supported_one(
    anonymous: Api, tokens: dict[str, str], version: str, path: str
) -> None:
    response = call(anonymous, "POST", path, _bearer(tokens["demo-broker"]), api_version=version)

    problem = expect_problem(response, 400, "api_version_unsupported")
    assert "1.2" in problem["detail"] and version in problem["detail"]


# --- the token endpoint ---------------------------------------------------------------------------------


def request_token(client: Api, auth: tuple[str, str] | None = None, **form: str) -> httpx.Response:
    return client.post("/connect/token", data=form, auth=auth)


def test_the_token_endpoint_issues_a_bearer_jwt(anonymous: Api, generated_secrets: dict[str, str]) -> None:
    response = request_token(
        anonymous,
        grant_type="client_credentials",
        client_id="demo-operator",
        client_secret=generated_secrets["demo-operator"],
    )

    token = expect(response, 200)
    assert token.keys() == {"access_token", "token_type", "expires_in", "scope"}
    assert token["token_type"] == "Bearer" and token["expires_in"] == 3600 and token["scope"] == "operator"
    assert jwt.get_unverified_header(token["access_token"])["alg"] == "HS256"
    prices = call(anonymous, "GET", "/prices/EUR", _bearer(token["access_token"]))
    assert prices.status_code == 200


def test_the_client_may_authenticate_with_http_basic(
    anonymous: Api, generated_secrets: dict[str, str]
) -> None:
    response = request_token(
        anonymous, auth=("demo-auditor", generated_secrets["demo-auditor"]), grant_type="client_credentials"
    )

    assert expect(response, 200)["scope"] == "auditor"


def test_a_wrong_secret_is_401_invalid_client_like_an_unknown_client(
    anonymous: Api, generated_secrets: dict[str, str]
) -> None:
    wrong = request_token(
        anonymous, grant_type="client_credentials", client_id="demo-auditor", client_secret="not-the-secret"
    )
    unknown = request_token(
        anonymous, grant_type="client_credentials", client_id=f"ghost-{uuid.uuid4().hex}", client_secret="x"
    )

    for response in (wrong, unknown):
        expect_problem(response, 401, "invalid_client")
        assert response.headers["www-authenticate"].startswith("Basic")
    # nothing tells whether the client exists (but each answer's own request id)
    assert loads(wrong) == {**loads(unknown), "requestId": wrong.headers["x-request-id"]}


@pytest.mark.parametrize(
    ("form", "status", "code"),
    [
        ({"grant_type": "password"}, 400, "unsupported_grant_type"),
        ({"grant_type": "client_credentials", "client_id": "demo-broker"}, 400, "invalid_request"),
        ({"grant_type": "client_credentials", "scope": "operator"}, 400, "invalid_scope"),
        ({"client_id": "demo-broker"}, 422, "validation_failed"),
    ],
)
def test_a_bad_token_request_is_a_problem(
    anonymous: Api, generated_secrets: dict[str, str], form: dict[str, str], status: int, code: str
) -> None:
    if "scope" in form or form.get("grant_type") == "password":
        form = {**form, "client_id": "demo-broker", "client_secret": generated_secrets["demo-broker"]}

    expect_problem(request_token(anonymous, **form), status, code)


def test_repeated_failures_are_rate_limited_with_retry_after(
    connect: Connect, anonymous: Api, generated_secrets: dict[str, str]
) -> None:
    """Ten failures in a row are answered 401, the eleventh 429. The limiter counts per worker process, so
    the attempts share one keep-alive connection (one worker); spread over new connections, two workers
    allow up to twenty."""
    form = {"grant_type": "client_credentials", "client_id": f"guesser-{uuid.uuid4().hex[:8]}"}
    with connect(version=None) as client:
        statuses = []
        for attempt in range(11):
            response = client.post("/connect/token", data={**form, "client_secret": f"guess-{attempt}"})
            statuses.append(response.status_code)

    assert statuses == [401] * 10 + [429], statuses
    expect_problem(response, 429, "too_many_failed_attempts")
    assert 1 <= int(response.headers["retry-after"]) <= 60
    other = request_token(
        anonymous,
        grant_type="client_credentials",
        client_id="demo-auditor",
        client_secret=generated_secrets["demo-auditor"],
    )
    assert other.status_code == 200  # the limit is per client, not for everyone


def test_the_token_endpoint_accepts_an_idempotency_key(
    anonymous: Api, generated_secrets: dict[str, str]
) -> None:
    response = anonymous.post(
        "/connect/token",
        data={
            "grant_type": "client_credentials",
            "client_id": "demo-auditor",
            "client_secret": generated_secrets["demo-auditor"],
        },
        headers={"Idempotency-Key": uuid.uuid4().hex},
        timeout=30,
    )

    assert response.status_code == 200, response.text


# --- partner isolation ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class DemoObjects:
    customer: Customer
    staged_code: str
    sell_code: str


@pytest.fixture(scope="module")
def demo_objects(broker: Api, addresses: Callable[[], str]) -> DemoObjects:
    """A customer with an account, a staged buy and a sell, all of partner demo."""
    customer = active_customer(broker, addresses())
    staged = expect(broker.post_json("/brokerbuy", {**buy_body(customer, 50), "stage": True}), 201)
    sell = expect(
        broker.post_json("/paymentrequest/brokersell", sell_body(customer, cryptoAmount=Decimal("0.001"))),
        201,
    )
    return DemoObjects(
        customer, staged["transaction"]["transactionCode"], sell["transaction"]["transactionCode"]
    )


def _missing(objects: DemoObjects) -> DemoObjects:
    """The same kinds of codes, naming nothing at all."""
    customer = objects.customer
    absent = Customer(
        f"absent-{uuid.uuid4().hex[:8]}", "AC" + uuid.uuid4().hex[:18].upper(), customer.address, ""
    )
    return DemoObjects(absent, "TX" + uuid.uuid4().hex[:16].upper(), "TX" + uuid.uuid4().hex[:16].upper())


ROUTES_WITH_CODES: dict[str, Callable[[Api, DemoObjects], httpx.Response]] = {
    "GET /customer/{code}": lambda api, o: api.get(f"/customer/{o.customer.code}"),
    "PUT /customer/{code}": lambda api, o: api.put_json(f"/customer/{o.customer.code}", {"status": "ACTIVE"}),
    "POST /customer/{code}/accounts": lambda api, o: api.post_json(
        f"/customer/{o.customer.code}/accounts", {"customerCryptoAddress": o.customer.address}
    ),
    "GET /customer/{code}/limits": lambda api, o: api.get(f"/customer/{o.customer.code}/limits"),
    "POST /transactions/custodian/{code}/commit": lambda api, o: api.post(
        f"/transactions/custodian/{o.staged_code}/commit"
    ),
    "POST /brokerbuy/simulate": lambda api, o: api.post_json("/brokerbuy/simulate", buy_body(o.customer, 50)),
    "POST /brokerbuy": lambda api, o: api.post_json("/brokerbuy", buy_body(o.customer, 50)),
    "POST /paymentrequest/brokersell/simulate": lambda api, o: api.post_json(
        "/paymentrequest/brokersell/simulate", sell_body(o.customer, cryptoAmount=Decimal("0.001"))
    ),
    "POST /paymentrequest/brokersell": lambda api, o: api.post_json(
        "/paymentrequest/brokersell", sell_body(o.customer, cryptoAmount=Decimal("0.001"))
    ),
}


def _anonymised(response: httpx.Response, objects: DemoObjects) -> str:
    text = response.text.replace(response.headers["x-request-id"], "<request>")  # each answer's own
    for code in (
        objects.customer.code,
        objects.customer.account_code,
        objects.staged_code,
        objects.sell_code,
    ):
        text = text.replace(code, "<code>")
    return text


@pytest.mark.parametrize("route", list(ROUTES_WITH_CODES))
def test_another_partners_objects_are_404_exactly_like_missing_ones(
    other_broker: Api, demo_objects: DemoObjects, route: str
) -> None:
    missing = _missing(demo_objects)

    foreign = ROUTES_WITH_CODES[route](other_broker, demo_objects)
    absent = ROUTES_WITH_CODES[route](other_broker, missing)

    problem = expect_problem(foreign, 404)
    assert problem["code"] == expect_problem(absent, 404)["code"]
    assert _anonymised(foreign, demo_objects) == _anonymised(absent, missing)


def test_another_partners_account_is_not_found_even_for_a_namesake_customer(
    broker: Api, other_broker: Api, addresses: Callable[[], str]
) -> None:
    demo_customer = active_customer(broker, addresses())
    namesake = active_customer(other_broker, addresses(), code=demo_customer.code)
    body = {**sell_body(namesake, cryptoAmount=Decimal("0.001")), "accountCode": demo_customer.account_code}

    expect_problem(other_broker.post_json("/paymentrequest/brokersell", body), 404, "account_not_found")
    buy = {**buy_body(namesake, 50), "accountCode": demo_customer.account_code}
    expect_problem(other_broker.post_json("/brokerbuy", buy), 404, "account_not_found")


def test_each_partner_registers_the_same_customer_code_independently(
    broker: Api, other_broker: Api, addresses: Callable[[], str]
) -> None:
    demo_customer = active_customer(broker, addresses())
    staged = expect(broker.post_json("/brokerbuy", {**buy_body(demo_customer, 50), "stage": True}), 201)
    code = staged["transaction"]["transactionCode"]
    expect_problem(other_broker.post(f"/transactions/custodian/{code}/commit"), 404, "transaction_not_found")

    body = {"customerCode": demo_customer.code, "trustLevel": "Plus"}
    theirs = expect(other_broker.post_json("/customer", body), 201)
    expect_problem(broker.post_json("/customer", body), 409, "customer_already_exists")

    assert theirs["status"] == "NEW" and theirs["accounts"] == [] and theirs["trustLevel"] == "Plus"
    ours = expect(broker.get(f"/customer/{demo_customer.code}"), 200)
    assert ours["status"] == "ACTIVE" and ours["trustLevel"] == "Basic"
    assert [account["accountCode"] for account in ours["accounts"]] == [demo_customer.account_code]
    assert (
        expect(broker.post(f"/transactions/custodian/{code}/commit"), 200)["transaction"]["status"]
        == "Sending"
    )
