"""Text round trip through the real app and its real projections: every free-text field a buy accepts
(`paymentReference`, the keys and values of `data`, `bankAccountNumber`, `blockchainMessage`) is fed
arbitrary Unicode (control characters, NUL, lone surrogates as JSON's `\\ud800` escapes, combining marks,
emoji, 10,000 characters). Text the service accepts comes back identical from `GET` (the read model, once
the projections caught up); text it cannot store is refused with 422 `text_not_storable`, text over a field's
length with 422 `validation_failed`, and afterwards the projections still work: an ordinary buy is readable.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from litestar.testing import TestClient

from interface.text import unstorable
from tests.e2e.support import AddressSource
from tests.in_process import app_client, bearer_headers

TEXT_MAX = 512  # interface.schemas.base.Text
KEY_MAX = 64  # a key of `data`
SPECIAL = [
    "\x00",
    "\ud800",
    "\udfff",
    "a\u0301\u0308",
    "\U0001f469\u200d\U0001f469\u200d\U0001f467",
    "\x7f\x1b",
]

ADDRESSES = AddressSource()
any_character = st.characters(exclude_categories=())  # surrogates included
text = st.one_of(
    st.text(any_character, max_size=40),
    st.lists(st.sampled_from(SPECIAL) | st.text(any_character, max_size=3), max_size=6).map("".join),
    st.sampled_from(["x" * 10_000, "\u00e9" * TEXT_MAX, "\U0001f600" * 200]),
)


@pytest.fixture(scope="module")
def client(database_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[TestClient, Path]]:
    var = tmp_path_factory.mktemp("text-round-trip") / "var"
    with app_client(database_url, var, projections=True) as client:
        yield client, var


@pytest.fixture(scope="module")
def broker(client: tuple[TestClient, Path]) -> dict[str, Any]:
    test_client, var = client
    return {"client": test_client, "headers": bearer_headers(test_client, var, "demo-broker")}


def with_new_customer(broker: dict[str, Any]) -> dict[str, Any]:
    """`broker` with a fresh ACTIVE customer and its BTC account (each example buys within its own limits)."""
    code, address = f"text-{uuid.uuid4().hex[:10]}", ADDRESSES()
    for method, path, body, status in [
        ("POST", "/customer", {"customerCode": code, "trustLevel": "Basic"}, 201),
        ("PUT", f"/customer/{code}", {"status": "ACTIVE"}, 200),
        ("POST", f"/customer/{code}/accounts", {"customerCryptoAddress": address}, 201),
    ]:
        answer = broker["client"].request(method, path, json=body, headers=broker["headers"])
        assert answer.status_code == status, answer.text
    return {**broker, "customer": code, "address": address}


def post_buy(broker: dict[str, Any], fields: dict[str, Any]) -> Any:
    body = {
        "customerCode": broker["customer"],
        "currencyCode": "EUR",
        "cryptoCode": "BTC",
        "fiatValue": 10,
        "destinationAddress": broker["address"],
        "paymentMethodCode": "BANK_EUR_BUY",
        "stage": True,
        **fields,
    }
    raw = json.dumps(body, ensure_ascii=True).encode("ascii")  # a lone surrogate travels as \ud800
    headers = {**broker["headers"], "Content-Type": "application/json"}
    return broker["client"].post("/brokerbuy", content=raw, headers=headers)


def read_back(broker: dict[str, Any], code: str) -> dict[str, Any]:
    answer = broker["client"].get(f"/transactions/custodian/{code}", headers=broker["headers"])
    assert answer.status_code == 200, answer.text
    return answer.json()["transaction"]


def still_healthy(broker: dict[str, Any]) -> None:
    answer = post_buy(broker, {"paymentReference": "ordinary"})
    assert answer.status_code == 201, answer.text
    code = answer.json()["transaction"]["transactionCode"]
    assert read_back(broker, code)["paymentReference"] == "ordinary"


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(reference=text, key=text, value=text, bank_account=text, message=text)
def test_text_comes_back_identical_or_is_refused_as_not_storable(
    broker: dict[str, Any], reference: str, key: str, value: str, bank_account: str, message: str
) -> None:
    fields = {
        "paymentReference": reference,
        "data": {key: value},
        "bankAccountNumber": bank_account,
        "blockchainMessage": message,
    }
    broker = with_new_customer(broker)
    answer = post_buy(broker, fields)
    texts = [reference, key, value, bank_account, message]
    if any(unstorable(t) for t in texts):
        assert answer.status_code == 422, answer.text
        assert answer.headers["content-type"].startswith("application/problem+json")
        assert answer.json()["code"] == "text_not_storable", answer.text
        still_healthy(broker)
        return
    if len(key) > KEY_MAX or any(len(t) > TEXT_MAX for t in (reference, value, bank_account, message)):
        assert answer.status_code == 422, answer.text
        assert answer.json()["code"] == "validation_failed", answer.text
        return
    assert answer.status_code == 201, answer.text
    created = answer.json()["transaction"]
    assert (created["paymentReference"], created["data"]) == (reference, {key: value})
    stored = read_back(broker, created["transactionCode"])
    assert (stored["paymentReference"], stored["data"]) == (reference, {key: value})
