"""The API document as integrators use it: a Python client generated from /schema/openapi.json with
openapi-python-client (the most used generator) covers every operation and runs a buy and a sell against the
real app, with its idempotent replays and a problem answer; and the document is valid OpenAPI.

The client is generated once per module into a temporary directory and imported from there; its requests go
to the app in-process through litestar's test transport.
"""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx
import pytest
from litestar.testing import TestClient
from litestar.testing import transport as test_transport
from openapi_spec_validator import validate

from interface.api_document.examples import guide_examples
from interface.http.shapes import EXAMPLE_ADDRESS
from tests.e2e.support import client_secrets
from tests.in_process import InProcessClient, in_process_app

PACKAGE = "generated_ledger_client"
GENERATOR = Path(sys.executable).with_name("openapi-python-client")
OPERATIONS = 28


app = in_process_app(projections=True)


@pytest.fixture(scope="module")
def document(app: InProcessClient) -> dict[str, Any]:
    answer = app.get("/schema/openapi.json")
    assert answer.status_code == 200
    return answer.json()


@pytest.fixture(scope="module")
def generated(document: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> Iterator[ModuleType]:
    """The generated package, imported; generation warnings are failures (a skipped operation is one)."""
    where = tmp_path_factory.mktemp("client")
    (where / "openapi.json").write_text(json.dumps(document))
    (where / "config.json").write_text(json.dumps({"package_name_override": PACKAGE, "post_hooks": []}))
    done = subprocess.run(
        [
            str(GENERATOR),
            "generate",
            "--path",
            str(where / "openapi.json"),
            "--config",
            str(where / "config.json"),
            "--output-path",
            str(where / PACKAGE),
            "--meta",
            "none",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Warning" not in done.stdout + done.stderr, done.stdout + done.stderr
    sys.path.insert(0, str(where))
    try:
        yield importlib.import_module(PACKAGE)
    finally:
        sys.path.remove(str(where))
        for name in [name for name in sys.modules if name.split(".")[0] == PACKAGE]:
            del sys.modules[name]


def module(package: ModuleType, name: str) -> Any:
    return importlib.import_module(f"{package.__name__}.{name}")


def client_of(generated: ModuleType, app: InProcessClient, client_id: str) -> Any:
    """A generated client of `client_id`, with a token got through the generated client itself."""
    c = module(generated, "client")
    issue_token = module(generated, "api.authentication.issue_token")
    models = module(generated, "models")
    transport = test_transport.TestClientTransport(app, raise_server_exceptions=False)
    anonymous = c.Client(base_url=str(app.base_url)).set_httpx_client(
        httpx.Client(base_url=str(app.base_url), transport=transport)
    )
    form = models.TokenForm(
        grant_type=models.TokenFormGrantType.CLIENT_CREDENTIALS,
        client_id=client_id,
        client_secret=client_secrets(app.var)[client_id],
    )
    token = issue_token.sync(client=anonymous, body=form)
    assert isinstance(token, models.Token), token
    return c.AuthenticatedClient(base_url=str(app.base_url), token=token.access_token).set_httpx_client(
        httpx.Client(
            base_url=str(app.base_url),
            transport=transport,
            headers={"Authorization": f"Bearer {token.access_token}"},
        )
    )


@pytest.fixture(scope="module")
def broker(generated: ModuleType, app: InProcessClient) -> Any:
    return client_of(generated, app, "demo-broker")


@pytest.fixture(scope="module")
def operator(generated: ModuleType, app: InProcessClient) -> Any:
    return client_of(generated, app, "demo-operator")


def active_customer_with_account(generated: ModuleType, broker: Any) -> tuple[str, str]:
    models = module(generated, "models")
    customers = "api.customers"
    code = f"gen-{uuid.uuid4().hex[:12]}"
    created = module(generated, f"{customers}.create_customer").sync(
        client=broker,
        body=models.CustomerCreate(
            customer_code=code,
            trust_level=models.CustomerCreateTrustLevel.BASIC,  # the settings' codes are enums
            status=models.CustomerCreateStatusType0.ACTIVE,
            currency_code=models.CustomerCreateCurrencyCodeType0.EUR,
        ),
    )
    assert isinstance(created, models.Customer), created
    account = module(generated, f"{customers}.create_account").sync(
        customer_code=code, client=broker, body=models.AccountCreate(customer_crypto_address=EXAMPLE_ADDRESS)
    )
    assert isinstance(account, models.Account), account
    return code, account.account_code


def test_the_document_is_valid_openapi(document: dict[str, Any]) -> None:
    validate(document)


def test_the_generated_client_has_every_operation(generated: ModuleType, document: dict[str, Any]) -> None:
    api = Path(generated.__file__).parent / "api"
    functions = {path.stem for path in api.glob("*/*.py") if path.stem != "__init__"}
    operations = [op for ops in document["paths"].values() for op in ops.values()]
    assert len(operations) >= OPERATIONS
    assert len(functions) == len(operations)


def test_a_buy_runs_through_the_generated_client(generated: ModuleType, broker: Any, operator: Any) -> None:
    models = module(generated, "models")
    customer, account = active_customer_with_account(generated, broker)

    def order(model: str) -> dict[str, Any]:
        """The buy's fields, with the enums the document gives `model` for the settings' codes."""
        return {
            "customer_code": customer,
            "currency_code": getattr(models, f"{model}CurrencyCode").EUR,
            "crypto_code": getattr(models, f"{model}CryptoCode").BTC,
            "fiat_value": 100,
            "destination_address": EXAMPLE_ADDRESS,
            "payment_method_code": getattr(models, f"{model}PaymentMethodCode").BANK_EUR_BUY,
        }

    simulated = module(generated, "api.buy.simulate_broker_buy").sync(
        client=broker, body=models.BrokerBuy(**order("BrokerBuy"))
    )
    assert isinstance(simulated, models.TransactionEnvelope), simulated
    assert simulated.transaction.status == "SIMULATED"

    create = module(generated, "api.buy.create_broker_buy")
    key = f"buy-{uuid.uuid4().hex}"
    buy = models.BrokerBuyCreate(**order("BrokerBuyCreate"), stage=True)
    first = create.sync_detailed(client=broker, body=buy, idempotency_key=key)
    again = create.sync_detailed(client=broker, body=buy, idempotency_key=key)
    assert first.status_code == again.status_code == 201
    assert again.headers["Idempotent-Replayed"] == "true"
    assert again.content == first.content
    staged = first.parsed.transaction
    assert (staged.status, staged.account_code) == ("Staged", account)

    committed = module(generated, "api.transactions.commit_transaction").sync(
        tx_code=staged.transaction_code, client=broker
    )
    assert committed.transaction.status == "Sending"
    sent = module(generated, "api.chain_reports.report_sendout").sync(
        client=operator,
        body=models.ChainSendout(
            transaction_code=staged.transaction_code, tx_id=f"sendout-{customer}", confirmations=2
        ),
    )
    assert sent.transaction.status == "COMPLETED"
    read = module(generated, "api.transactions.get_transaction").sync(
        tx_code=staged.transaction_code, client=broker
    )
    assert read.transaction.status == "COMPLETED"


def test_a_sell_runs_through_the_generated_client(generated: ModuleType, broker: Any, operator: Any) -> None:
    models = module(generated, "models")
    customer, account = active_customer_with_account(generated, broker)
    sell = models.BrokerSellByFiatValue(
        customer_code=customer,
        account_code=account,
        currency_code=models.BrokerSellByFiatValueCurrencyCode.EUR,
        crypto_code=models.BrokerSellByFiatValueCryptoCode.BTC,
        payment_method_code=models.BrokerSellByFiatValuePaymentMethodCode.BANK_EUR_SELL,
        fiat_value=250,
    )
    create = module(generated, "api.sell.create_broker_sell")
    key = f"sell-{uuid.uuid4().hex}"
    first = create.sync_detailed(client=broker, body=sell, idempotency_key=key)
    again = create.sync_detailed(client=broker, body=sell, idempotency_key=key)
    assert first.status_code == again.status_code == 201
    assert again.headers["Idempotent-Replayed"] == "true"
    assert again.content == first.content
    initiated = first.parsed.transaction
    assert initiated.status == "Initiated"

    deposit = models.ChainDeposit(
        crypto_code=models.ChainDepositCryptoCode.BTC,
        address=initiated.destination_crypto_address,
        tx_id=f"deposit-{customer}",
        crypto_amount=initiated.executed_amounts.crypto_amount,
        confirmations=2,
    )
    confirmed = module(generated, "api.chain_reports.report_deposit").sync(client=operator, body=deposit)
    assert confirmed.transaction.status == "ToPayout"
    code = initiated.transaction_code
    transactions = "api.transactions"
    confirming = module(generated, f"{transactions}.confirm_payout").sync(
        transaction_code=code, client=operator, body=models.PayoutUpdate(payment_reference="payout-77")
    )
    assert confirming.transaction.status == "PayoutConfirming"
    paid = module(generated, f"{transactions}.payout").sync(
        transaction_code=code, client=operator, body=models.PayoutUpdate()
    )
    assert paid.transaction.status == "COMPLETED"


def test_a_refusal_reaches_the_generated_client_as_a_problem(generated: ModuleType, broker: Any) -> None:
    models = module(generated, "models")
    answer = module(generated, "api.transactions.get_transaction").sync_detailed(
        tx_code="TX0000000000000000", client=broker
    )
    assert answer.status_code == 404
    assert answer.headers["content-type"] == "application/problem+json"
    assert isinstance(answer.parsed, models.Problem)
    assert (answer.parsed.status, answer.parsed.code) == (404, "transaction_not_found")


def test_an_unknown_path_under_the_document_is_a_problem(app: TestClient) -> None:
    for path in ("/schema/nothing-here", "/schema/nothing.json"):
        answer = app.get(path)
        assert answer.status_code == 404
        assert answer.headers["content-type"] == "application/problem+json"
        assert answer.json()["code"] == "not_found"


def test_the_documents_examples_are_the_checked_examples_of_the_guide(document: dict[str, Any]) -> None:
    guide = guide_examples()
    buy = next(e for e in guide if (e.method, e.path, e.status) == ("POST", "/brokerbuy", None))
    operation = document["paths"]["/brokerbuy"]["post"]
    request = operation["requestBody"]["content"]["application/json"]["examples"]["guide"]["value"]
    answer = operation["responses"]["201"]["content"]["application/json"]["examples"]["guide"]["value"]
    assert (request, answer) == (buy.body, json.loads(bytes(buy.answer)))


def test_every_operation_carries_a_request_and_a_response_example_of_the_guide(
    document: dict[str, Any],
) -> None:
    lacking = []
    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            bodies = operation.get("requestBody", {}).get("content", {}).values()
            answers = [
                media for r in operation["responses"].values() for media in r.get("content", {}).values()
            ]
            if any("guide" not in media.get("examples", {}) for media in bodies):
                lacking.append(f"{method.upper()} {path}: request")
            if not any("guide" in media.get("examples", {}) for media in answers):
                lacking.append(f"{method.upper()} {path}: response")
    assert lacking == []
