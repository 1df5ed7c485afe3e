"""The service judges a requested callbackUrl by the addresses its host resolves to when the buy is made: the
app wires the resolving policy (`projections.callbacks.urls`) into the ledger through its port. A fake
resolver stands in for DNS; nothing is connected to. Without that wiring the ledger applies the static
rules only (`tests/unit/test_callback_url_port.py`)."""

from __future__ import annotations

from projections.callbacks.urls import SystemResolver
from tests.in_process import InProcessClient, in_process_app

ANSWERS = {"hooks.partner.example": ["93.184.215.14"], "rebind.partner.example": ["10.1.2.3"]}
ADDRESS = "bc1qcr8te4kr609gcawutmrza0j4xv80jy8z306fyu"

# while the app lives, the resolver it wires answers from ANSWERS instead of asking DNS
client = in_process_app(patches=[(SystemResolver, "__call__", lambda self, host, port: ANSWERS[host])])


def buy(client: InProcessClient, callback_url: str) -> dict[str, object]:
    body = {
        "customerCode": "nobody-registered",
        "currencyCode": "EUR",
        "cryptoCode": "BTC",
        "fiatValue": 100,
        "destinationAddress": ADDRESS,
        "paymentMethodCode": "BANK_EUR_BUY",
        "callbackUrl": callback_url,
    }
    answer = client.post("/brokerbuy", json=body, headers=client.headers_of("demo-broker"))
    return {"status": answer.status_code, **answer.json()}


def test_a_buy_whose_callback_host_resolves_to_a_private_address_is_refused(
    client: InProcessClient,
) -> None:
    problem = buy(client, "https://rebind.partner.example/hook")
    assert (problem["status"], problem["code"]) == (422, "callback_url_refused")
    assert "resolves to the non-public address 10.1.2.3" in str(problem["detail"])


def test_a_buy_whose_callback_host_resolves_to_a_public_address_gets_past_the_url_check(
    client: InProcessClient,
) -> None:
    problem = buy(client, "https://hooks.partner.example/hook")
    assert problem["code"] != "callback_url_refused"  # refused further on: the customer is unknown
    assert problem["status"] == 404
