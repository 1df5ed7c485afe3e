"""Text round trip through the real app and its real projections: every text field the API takes from a client
(but callbackUrl, which must be a URL) is fed arbitrary Unicode (control characters, NUL, lone surrogates as
JSON's `\\ud800` escapes, combining marks, emoji, 10,000 characters) in one life of a customer: its
portfolioCode; a buy's paymentReference, `data` keys and values, bankAccountNumber and blockchainMessage; the
sendout's txId; a sell's paymentReference and `data`; the deposit's txId; the payout's paymentReference (both
steps); an account buy's and an account sell's `ip`; and a reserve adjustment's `note`.

Each request is answered as its texts deserve: 422 `text_not_storable` when one cannot be stored, else 422
`validation_failed` when one breaks its field's length or pattern, else accepted. A refused step is done
again with ordinary text, so that the next steps have what they need. Then what was accepted comes back
identical from the transaction list, which only the read model serves (a stalled projection would leave it
behind), and GET /health is 200: no event stalled a projection.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from litestar.testing import TestClient

from interface.chain.shapes import TX_ID_PATTERN
from interface.http.shapes import CODE_PATTERN
from interface.http.text import unstorable
from tests.e2e.support import AddressSource
from tests.in_process import InProcessClient, in_process_app

SPECIAL = [
    "\x00",
    "\ud800",
    "\udfff",
    "a\u0301\u0308",
    "\U0001f469\u200d\U0001f469\u200d\U0001f467",
    "\x7f\x1b",
]
ADDRESSES = AddressSource()
CATCH_UP_SECONDS = 15


Text = Callable[[str], str]  # the text a request gives a field, by the field's name in FITS


def up_to(limit: int) -> Callable[[str], bool]:
    return lambda text: len(text) <= limit


# What each field takes besides storable text (the interface's shapes): its length, and a code's pattern.
FITS: dict[str, Callable[[str], bool]] = {
    "portfolioCode": lambda text: 1 <= len(text) <= 64 and re.fullmatch(CODE_PATTERN, text) is not None,
    "buyReference": up_to(512),
    "buyDataKey": up_to(64),
    "buyDataValue": up_to(512),
    "bankAccountNumber": up_to(512),
    "blockchainMessage": up_to(512),
    "sendoutTxId": lambda text: 1 <= len(text) <= 128 and re.fullmatch(TX_ID_PATTERN, text) is not None,
    "sellReference": up_to(512),
    "sellDataKey": up_to(64),
    "sellDataValue": up_to(512),
    "depositTxId": lambda text: 1 <= len(text) <= 128 and re.fullmatch(TX_ID_PATTERN, text) is not None,
    "payoutConfirmingReference": up_to(512),
    "payoutReference": up_to(512),
    "accountBuyIp": up_to(64),
    "accountSellIp": up_to(64),
    "note": up_to(512),
}

any_character = st.characters(exclude_categories=())  # surrogates included
text = st.one_of(
    st.text(any_character, max_size=40),
    st.lists(st.sampled_from(SPECIAL) | st.text(any_character, max_size=3), max_size=6).map("".join),
    st.sampled_from(["x" * 10_000, "\u00e9" * 512, "\U0001f600" * 200, "ordinary-text_1"]),
).map(lambda drawn: json.loads(json.dumps(drawn)))  # as the service reads it: \ud83d\ude00 is one character
texts = st.fixed_dictionaries({name: text for name in FITS})


client = in_process_app(projections=True)


@pytest.fixture(scope="module")
def roles(client: InProcessClient) -> dict[str, dict[str, str]]:
    return {role: client.headers_of(f"demo-{role}") for role in ("broker", "operator")}


@dataclass
class Life:
    """One customer's life, with the texts drawn for it and what the read model should show at its end."""

    client: TestClient
    roles: dict[str, dict[str, str]]
    texts: dict[str, str]
    customer: str = field(default_factory=lambda: f"text-{uuid.uuid4().hex[:10]}")
    address: str = field(default_factory=ADDRESSES)
    account: str = ""
    expected: dict[str, dict[str, Any]] = field(default_factory=dict)  # transaction code -> fields

    def send(self, role: str, method: str, path: str, body: dict[str, Any]) -> Any:
        raw = json.dumps(body, ensure_ascii=True).encode("ascii")  # a lone surrogate travels as \ud800
        headers = {**self.roles[role], "Content-Type": "application/json"}
        return self.client.request(method, path, content=raw, headers=headers)

    def step(self, role: str, method: str, path: str, body: Callable[[Text], dict]) -> tuple[Any, Text]:
        """The request with the drawn texts (`body(drawn)`), answered as they deserve. Accepted: its answer
        and the texts it took; else the same request with ordinary texts, which must be accepted."""
        used: list[str] = []

        def drawn(name: str) -> str:
            used.append(name)
            return self.texts[name]

        answer = self.send(role, method, path, body(drawn))
        if any(unstorable(self.texts[name]) for name in used):
            expect_refused(answer, "text_not_storable")
        elif not all(FITS[name](self.texts[name]) for name in used):
            expect_refused(answer, "validation_failed")
        else:
            assert answer.status_code in (200, 201), answer.text
            return answer.json(), drawn

        def ordinary(name: str) -> str:
            return f"ordinary-{name}"

        answer = self.send(role, method, path, body(ordinary))
        assert answer.status_code in (200, 201), answer.text
        return answer.json(), ordinary


def expect_refused(answer: Any, code: str) -> None:
    assert answer.status_code == 422, answer.text
    assert answer.headers["content-type"].startswith("application/problem+json")
    assert answer.json()["code"] == code, answer.text


def register(life: Life) -> None:
    _, t = life.step(
        "broker",
        "POST",
        "/customer",
        lambda t: {"customerCode": life.customer, "trustLevel": "Basic", "portfolioCode": t("portfolioCode")},
    )
    activated = life.send("broker", "PUT", f"/customer/{life.customer}", {"status": "ACTIVE"})
    assert activated.status_code == 200, activated.text
    account = life.send(
        "broker", "POST", f"/customer/{life.customer}/accounts", {"customerCryptoAddress": life.address}
    )
    assert account.status_code == 201, account.text
    life.account = account.json()["accountCode"]
    read = life.client.get(f"/customer/{life.customer}", headers=life.roles["broker"]).json()
    assert read["portfolioCode"] == t("portfolioCode")


def buy_and_send_out(life: Life) -> None:
    def buy(t: Text) -> dict[str, Any]:
        return {
            **{"customerCode": life.customer, "currencyCode": "EUR", "cryptoCode": "BTC", "fiatValue": 10},
            **{"destinationAddress": life.address, "paymentMethodCode": "BANK_EUR_BUY"},
            "paymentReference": t("buyReference"),
            "data": {t("buyDataKey"): t("buyDataValue")},
            "bankAccountNumber": t("bankAccountNumber"),
            "blockchainMessage": t("blockchainMessage"),
        }

    bought, t = life.step("broker", "POST", "/brokerbuy", buy)
    code = bought["transaction"]["transactionCode"]
    _, t_out = life.step(
        "operator",
        "POST",
        "/chain/sendouts",
        lambda t: {"transactionCode": code, "txId": t("sendoutTxId"), "confirmations": 0},
    )
    life.expected[code] = {
        "status": "Sending",
        "paymentReference": t("buyReference"),
        "data": {t("buyDataKey"): t("buyDataValue")},
        "blockchainTransactionId": t_out("sendoutTxId"),
    }


def sell_and_pay_out(life: Life) -> None:
    def sell(t: Text) -> dict[str, Any]:
        return {
            **{"customerCode": life.customer, "accountCode": life.account, "currencyCode": "EUR"},
            **{"cryptoCode": "BTC", "paymentMethodCode": "BANK_EUR_SELL", "cryptoAmount": 0.001},
            "paymentReference": t("sellReference"),
            "data": {t("sellDataKey"): t("sellDataValue")},
        }

    answer, t = life.step("broker", "POST", "/paymentrequest/brokersell", sell)
    sold = answer["transaction"]
    code = sold["transactionCode"]
    deposit = {
        **{"cryptoCode": "BTC", "address": sold["destinationCryptoAddress"], "confirmations": 6},
        "cryptoAmount": sold["executedAmounts"]["cryptoAmount"],
    }
    _, t_in = life.step(
        "operator", "POST", "/chain/deposits", lambda t: {**deposit, "txId": t("depositTxId")}
    )
    path = f"/transactions/custodian/{code}"
    _, t_confirming = life.step(
        "operator", "PUT", f"{path}/payoutconfirming", lambda t: reference(t, "payoutConfirmingReference")
    )
    _, t_paid = life.step("operator", "PUT", f"{path}/payout", lambda t: reference(t, "payoutReference"))
    life.expected[code] = {
        "status": "COMPLETED",  # the last payout reference given (an empty one gives none)
        "paymentReference": t_paid("payoutReference")
        or t_confirming("payoutConfirmingReference")
        or t("sellReference"),
        "data": {t("sellDataKey"): t("sellDataValue")},
        "blockchainTransactionId": t_in("depositTxId"),
    }


def reference(t: Text, name: str) -> dict[str, str]:
    return {"paymentReference": t(name)}


def alternative_buy_and_sell_and_reserve_note(life: Life) -> None:
    account_buy = {"paymentMethodCode": "BANK_EUR_BUY", "accountCode": life.account, "amount": 10}
    bought, _ = life.step("broker", "POST", "/buy/broker", lambda t: {**account_buy, "ip": t("accountBuyIp")})
    account_sell = {"paymentMethodCode": "BANK_EUR_SELL", "accountCode": life.account, "cryptoAmount": 0.001}
    sold, _ = life.step(
        "broker", "POST", "/sell/broker", lambda t: {**account_sell, "ip": t("accountSellIp")}
    )
    for answer in (bought, sold):
        life.expected[answer["transaction"]["transactionCode"]] = expected_of(answer["transaction"])
    to = {"name": "text-round-trip", "type": "Exchange"}
    adjustment = {"kind": "OpeningBalance", "code": "EUR", "amount": 0.01, "toReserve": to}
    recorded, t = life.step(
        "operator", "POST", "/reserves/adjustments", lambda t: {**adjustment, "note": t("note")}
    )
    assert recorded["note"] == t("note")


def expected_of(transaction: dict[str, Any]) -> dict[str, Any]:
    """What the read model must show of a transaction as the write side answered it."""
    names = ("status", "paymentReference", "data", "blockchainTransactionId")
    return {name: transaction.get(name) for name in names}


def read_model_shows(life: Life) -> None:
    """The transaction list (read model only) shows every transaction of the life as expected, within
    CATCH_UP_SECONDS, and no projection stalled."""
    deadline = time.monotonic() + CATCH_UP_SECONDS
    while True:
        listed = life.client.get(
            "/transactions/custodian", params={"customerCode": life.customer}, headers=life.roles["broker"]
        )
        assert listed.status_code == 200, listed.text
        shown = {record["transactionCode"]: expected_of(record) for record in listed.json()["records"]}
        if shown == life.expected or time.monotonic() > deadline:
            break
        time.sleep(0.02)
    health = life.client.get("/health")
    assert health.status_code == 200, health.text
    assert shown == life.expected


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(drawn=texts)
def test_every_text_comes_back_identical_from_the_read_model_or_is_refused(
    client: InProcessClient, roles: dict[str, dict[str, str]], drawn: dict[str, str]
) -> None:
    life = Life(client, roles, drawn)
    register(life)
    buy_and_send_out(life)
    sell_and_pay_out(life)
    alternative_buy_and_sell_and_reserve_note(life)
    read_model_shows(life)
