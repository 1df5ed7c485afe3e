"""The live API document against the running application: Schemathesis generates requests for every
operation from /schema/openapi.json and runs all of its checks on every answer.

Every operation is called with a valid token of a client holding the role its security requirement names,
and with the api_version its document allows (an enum of one), so requests get past authentication and
reach validation and the use cases; the customer and account the document's examples name (its own, and
docs/api.md's `alice-1`) exist, so example requests succeed and successful answers are checked too. Every
check is enabled. The seed is fixed and the examples per operation bounded, so a run is repeatable: the
default run takes the document's examples and draws QUICK_EXAMPLES positive and negative cases per operation
(about 260 cases, under 10 s, every operation and every check); `--run-slow` adds Schemathesis' coverage
phase (some 2,250 boundary and missing-field cases) and draws MAX_EXAMPLES (several minutes).
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from litestar import Litestar
from schemathesis.config import SchemathesisConfig
from schemathesis.python.asgi import get_client, shutdown_lifespans
from schemathesis.specs.openapi.checks import positive_data_acceptance

from interface.app import Runtime, build_runtime, create_app
from interface.http.security import AUDITOR, BROKER, OPERATOR
from interface.http.shapes import EXAMPLE_ACCOUNT, EXAMPLE_ADDRESS, EXAMPLE_CUSTOMER
from interface.shared.instants import AN_INSTANT
from projections.callbacks.service import Callbacks
from projections.callbacks.urls import SystemResolver
from tests.e2e.support import client_secrets, obtain_token
from tests.in_process import app_environment

SEED = 20260310
GUIDE_CUSTOMER = "alice-1"
GUIDE_ADDRESS = "bc1qw508d6qejxtdg4y5r3zarvary0c5xw7kv8f3t4"
MAX_EXAMPLES = 90  # with --run-slow; 100 before the document had oneOf variants: the same time
QUICK_EXAMPLES = 8  # the default run: the document's examples and a few generated cases per operation
PUBLIC_ADDRESS = "93.184.215.14"  # what every callback host resolves to here; never connected to
MAX_KEY = 255  # the longest Idempotency-Key the document allows
CLIENT_OF_ROLE = {AUDITOR: "demo-auditor", BROKER: "demo-broker", OPERATOR: "demo-operator"}
# Refusals of schema-valid requests that JSON Schema cannot foresee, by operation and `code`, each with why:
# a positive case refused with one of these is not held against the document (positive_data_acceptance
# expects 2xx, or 401/403/404/409/429); every other refusal of a positive case fails the test.
ADDRESS = "an address must pass its chain's checksum, which no pattern can say"
INACTIVE = "the customer is NEW until activated: its status, not the request"
FEES = "the fees include the network fee at the current price, so the least amount moves with the market"
ACCOUNT_SCALE = (
    "the account's crypto-currency decides the amount's decimal places, and the body does not name it"
)
SAME_RESERVE = "JSON Schema cannot say that two fields differ (a Move to the reserve it comes from)"
RESERVE_TYPE = "a reserve keeps the type it was first given"
LIMIT = "what the customer bought or sold before today and this month decides what a limit leaves"
PRICE = "the wiggle room for a requested price lies around the current price, which moves"
TRADE = {
    "customer_not_active": INACTIVE,
    "crypto_address_invalid": ADDRESS,
    "trust_level_limit_exceeded": LIMIT,
    "requested_price_outside_wiggle_room": PRICE,
    "amount_below_fees": FEES,
}
REFUSED_FOR_STATE = {
    "createAccount": {"crypto_address_invalid": ADDRESS},
    "simulateBrokerBuy": TRADE,
    "createBrokerBuy": TRADE,
    "simulateBrokerSell": TRADE,
    "createBrokerSell": TRADE,
    "simulateAccountBuy": {"amount_below_fees": FEES, "trust_level_limit_exceeded": LIMIT},
    "createAccountBuy": {"amount_below_fees": FEES, "trust_level_limit_exceeded": LIMIT},
    "createAccountSell": {
        "amount_too_precise": ACCOUNT_SCALE,
        "amount_below_fees": FEES,
        "trust_level_limit_exceeded": LIMIT,
    },
    "createReserveAdjustment": {
        "reserve_move_to_same_reserve": SAME_RESERVE,
        "reserve_type_mismatch": RESERVE_TYPE,
    },
    "getReconciliation": {"period_too_long": "JSON Schema cannot bound the time between two date-times"},
}


class CountingApp:
    """The application, counting the requests Schemathesis sends it (the API document's own excluded), and
    the var directory it was built with (its clients' secrets)."""

    def __init__(self, app: Litestar, var: Path) -> None:
        self.app = app
        self.var = var
        self.statuses: Counter[str] = Counter()

    @property
    def requests(self) -> int:
        return self.statuses.total()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["path"].startswith("/schema"):
            await self.app(scope, receive, send)
            return

        async def counting_send(message: Any) -> None:
            if message["type"] == "http.response.start":
                handler = scope.get("route_handler")
                operation = getattr(handler, "operation_id", None) or scope["method"]
                self.statuses[f"{operation} {message['status']}"] += 1
            await send(message)

        await self.app(scope, receive, counting_send)


def tokens_of_roles(counting_app: CountingApp) -> dict[str, str]:
    """A token per role, from POST /connect/token of the app as its clients get them. The requests go through
    Schemathesis' own ASGI session (whose lifespan of the app the run goes on with) and are not counted among
    the run's."""
    secrets = client_secrets(counting_app.var)
    with get_client(counting_app) as session:
        tokens = {
            role: obtain_token(session, client, secrets[client]) for role, client in CLIENT_OF_ROLE.items()
        }
    counting_app.statuses.clear()
    return tokens


def tokens_by_operation(tokens: dict[str, str], document: dict[str, Any]) -> dict[str, str]:
    """Per guarded operation ("POST /customer"): the token of a client holding the first role the operation's
    security requirement names in the document."""
    return {
        f"{method.upper()} {path}": tokens[operation["security"][0]["bearer"][0]]
        for path, operations in document["paths"].items()
        for method, operation in operations.items()
        if operation.get("security", [{}])[0].get("bearer")
    }


def role_tokens(tokens: dict[str, str]) -> type:
    """A Schemathesis auth provider: it gives each operation its token, so the checks know the credentials are
    real ones (and, e.g., `ignored_auth` removes or spoils them to see them enforced)."""

    class RoleTokens:
        def get(self, case: Any, context: Any) -> str | None:
            return tokens.get(case.operation.label)

        def set(self, case: Any, token: str, context: Any) -> None:
            case.headers = {**(case.headers or {}), "Authorization": f"Bearer {token}"}

    return RoleTokens


def seed_the_examples(runtime: Runtime) -> None:
    """The customer and account the document's examples name, so example requests succeed (2xx) and their
    answers are checked too, not only refusals."""
    partner = runtime.credentials.client(CLIENT_OF_ROLE[BROKER]).partner
    runtime.use_cases.customers.register_customer(partner, EXAMPLE_CUSTOMER, "Basic", status="ACTIVE")
    account, _ = runtime.use_cases.customers.open_account(partner, EXAMPLE_CUSTOMER, EXAMPLE_ADDRESS)
    assert account.code == EXAMPLE_ACCOUNT
    # the customer of the operations' examples taken from docs/api.md, with the address they buy to
    runtime.use_cases.customers.register_customer(partner, GUIDE_CUSTOMER, "Basic", status="ACTIVE")
    runtime.use_cases.customers.open_account(partner, GUIDE_CUSTOMER, GUIDE_ADDRESS)


@pytest.fixture(scope="module")
def counting_app(database_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[CountingApp]:
    """The app in the environment of tests/in_process.py, its lifespan Schemathesis' (not a test client's)."""
    var = tmp_path_factory.mktemp("contract") / "var"
    # generated callback URLs name hosts nobody owns: they resolve to a public address without asking DNS,
    # and no callback is delivered (nothing leaves 127.0.0.1)
    patches = [
        (SystemResolver, "__call__", lambda self, host, port: [PUBLIC_ADDRESS]),
        (Callbacks, "start", lambda self: None),
        (Callbacks, "stop", lambda self: None),
    ]
    with app_environment(var, projections=True, patches=patches):
        runtime = build_runtime(database_url)
        seed_the_examples(runtime)
        app = CountingApp(create_app(runtime), var)
        yield app
        shutdown_lifespans()


@pytest.fixture(scope="module")
def api_schema(counting_app: CountingApp, request: pytest.FixtureRequest) -> Any:
    slow = request.config.getoption("--run-slow")
    config = SchemathesisConfig.from_dict(
        {
            "seed": SEED,
            "generation": {"max-examples": MAX_EXAMPLES if slow else QUICK_EXAMPLES},
            "phases": {"coverage": {"enabled": slow}},
            "checks": {
                "enabled": True
            },  # every check, positive_data_acceptance and negative_data_rejection too
        }
    )
    schema = schemathesis.openapi.from_asgi("/schema/openapi.json", counting_app, config=config)
    tokens = tokens_by_operation(tokens_of_roles(counting_app), schema.raw_schema)
    schema.auth.auth(refresh_interval=None)(role_tokens(tokens))
    return schema


@pytest.fixture(autouse=True)
def node_id_for_schemathesis(request: pytest.FixtureRequest) -> None:
    """Schemathesis 4's lazy schemas read `item._nodeid`, which pytest 9 no longer has; give it back."""
    if not hasattr(request.node, "_nodeid"):
        request.node._nodeid = request.node.nodeid


schema = schemathesis.pytest.from_fixture("api_schema")
KEYS = itertools.count()
GENERATED: list[str] = []


@schema.parametrize()
def test_every_answer_conforms_to_the_api_document(case: Any) -> None:
    unique_idempotency_key(case)
    GENERATED.append(case.operation.label)
    response = case.call()
    excluded = [positive_data_acceptance] if refused_for_state(case, response) else []
    case.validate_response(response, excluded_checks=excluded)
    if case.method.upper() == case.operation.method.upper():  # not a probe with another method (405)
        assert_code_listed(case.operation.definition.raw, response.status_code, response)


def assert_code_listed(operation: dict[str, Any], status: int, response: Any) -> None:
    """A problem's `code` is among those the document lists for the operation and status (`x-codes`)."""
    if not response.headers.get("content-type", [""])[0].startswith("application/problem+json"):
        return
    code = response.json()["code"]
    listed = operation["responses"].get(str(status), {}).get("x-codes", [])
    assert code in listed, f"{operation['operationId']} answered {status} {code}, not among {listed}"


def refused_for_state(case: Any, response: Any) -> bool:
    """A positive case refused for a reason the document cannot give (REFUSED_FOR_STATE), or an instant whose
    UTC time is outside the ledger's years (JSON Schema's date-time cannot bound it:
    `0001-01-01T00:00:00+01:00` is a date-time, of the year 0 in UTC)."""
    if case.meta is None or case.meta.generation.mode.is_negative:
        return False
    if response.status_code == 400:
        return response.json().get("code") == "malformed_request" and AN_INSTANT in response.json()["detail"]
    if response.status_code != 422:
        return False
    reasons = REFUSED_FOR_STATE.get(case.operation.definition.raw.get("operationId", ""), {})
    return response.json().get("code") in reasons


def unique_idempotency_key(case: Any) -> None:
    """An Idempotency-Key is single-use: reused with another body it is refused (422) by design. Schemathesis
    cannot know that and draws the same short keys again and again, so each generated key is made unique;
    replays and reuse need tests that mean them."""
    key = (case.headers or {}).get("Idempotency-Key")
    if isinstance(key, str) and 1 <= len(key) <= MAX_KEY:  # a key made invalid on purpose stays invalid
        case.headers["Idempotency-Key"] = f"{next(KEYS)}-{key}"[:MAX_KEY]


def test_the_contract_run_generated_requests(
    counting_app: CountingApp, capsys: pytest.CaptureFixture[str], record_property: Any
) -> None:
    """Runs after the contract test: reports how much it generated (in the terminal and the JUnit XML)."""
    record_property("schemathesis_cases", len(GENERATED))
    record_property("schemathesis_requests", counting_app.requests)
    outcomes = ", ".join(f"{outcome}: {count}" for outcome, count in sorted(counting_app.statuses.items()))
    with capsys.disabled():
        print(
            f"\nSchemathesis generated {len(GENERATED)} cases; the service answered {counting_app.requests}"
            f" requests ({outcomes})"
        )

    assert GENERATED
    assert counting_app.requests >= len(GENERATED)
