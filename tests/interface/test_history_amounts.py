"""A transaction's history writes every amount at its asset's scale, in the events' data as in the
transaction: crypto at its precision (BTC 8 places), fiat at its minor unit (EUR 2). In-process, on the real
app and PostgreSQL."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from litestar.testing import TestClient

COUNTS = frozenset({"version", "confirmations"})  # integers, not amounts
CRYPTO_NAMES = frozenset({"crypto", "amount", "cryptoAmount", "crypto_amount"})


class Number(str):
    """A JSON number as it was written."""


def sent(answer: Any, status: int) -> dict[str, Any]:
    assert answer.status_code == status, answer.text
    return answer.json()["transaction"]


def places_expected(name: str) -> int:
    crypto = name in CRYPTO_NAMES or name.endswith(("Crypto", "_crypto"))
    return 8 if crypto else 2


def numbers(value: Any, name: str = "") -> Iterator[tuple[str, Number]]:
    """Every number of a JSON value with the name of the field holding it."""
    if isinstance(value, Number):
        yield name, value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from numbers(item, key)
    elif isinstance(value, list):
        for item in value:
            yield from numbers(item, name)


def history_numbers(client: TestClient, broker: dict[str, str], code: str) -> list[tuple[str, Number]]:
    answer = client.get(f"/transactions/custodian/{code}/history", headers=broker)
    assert answer.status_code == 200, answer.text
    document = json.loads(answer.text, parse_float=Number, parse_int=Number)
    found = list(numbers(document["events"]))
    assert found
    return found + list(numbers(document["transaction"]))


def assert_at_their_scale(found: list[tuple[str, Number]]) -> None:
    wrong = [
        (name, text)
        for name, text in found
        if name not in COUNTS and len(text.partition(".")[2]) != places_expected(name)
    ]
    assert not wrong, wrong


def test_every_amount_in_a_buys_history_is_written_at_its_assets_scale(
    client: TestClient, broker: dict[str, str], customer: dict[str, str]
) -> None:
    body = {
        "customerCode": customer["code"],
        "currencyCode": "EUR",
        "cryptoCode": "BTC",
        "fiatValue": 100,
        "destinationAddress": customer["address"],
        "paymentMethodCode": "BANK_EUR_BUY",
    }
    code = sent(client.post("/brokerbuy", json=body, headers=broker), 201)["transactionCode"]

    found = history_numbers(client, broker, code)

    assert ("network_crypto", "0.00002000") in found and ("requested_fiat", "100.00") in found
    assert ("limit_amount", "100.00") in found
    assert_at_their_scale(found)


def test_every_amount_in_a_paid_sells_history_is_written_at_its_assets_scale(
    client: TestClient, broker: dict[str, str], operator: dict[str, str], customer: dict[str, str]
) -> None:
    body = {
        "customerCode": customer["code"],
        "accountCode": customer["account"],
        "currencyCode": "EUR",
        "cryptoCode": "BTC",
        "paymentMethodCode": "BANK_EUR_SELL",
        "cryptoAmount": 0.002,
    }
    sell = sent(client.post("/paymentrequest/brokersell", json=body, headers=broker), 201)
    deposit = {
        "cryptoCode": "BTC",
        "address": sell["destinationCryptoAddress"],
        "txId": f"history-{sell['transactionCode']}",
        "cryptoAmount": 0.002,
        "confirmations": 6,
    }
    sent(client.post("/chain/deposits", json=deposit, headers=operator), 200)

    found = history_numbers(client, broker, sell["transactionCode"])

    assert ("amount", "0.00200000") in found and ("requested_crypto", "0.00200000") in found
    assert_at_their_scale(found)
