"""Every amount field of every endpoint, each in a request that passes every other check, with a JSON number
written into it as text: any size and exponent (`1E+999999999`, 5,000 digits), which no JSON encoder of
Python values writes.

The requests name a customer and its account (`Holder`: the mapping `tests/interface/conftest.py`'s
`customer` fixture gives), so that the number is what they are judged by.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

Holder = Mapping[str, str]  # code, account and address of an ACTIVE customer with a BTC account
PLACEHOLDER = "__number__"
DEPOSIT_ADDRESS = "bc1qw508d6qejxtdg4y5r3zarvary0c5xw7kv8f3t4"


@dataclass(frozen=True)
class AmountField:
    operation: str  # the operationId
    role: str  # who may call it: broker or operator
    method: str
    path: str
    name: str  # the field, as the client sends it
    body: Callable[[Holder], dict[str, Any]]  # the rest of the request

    @property
    def id(self) -> str:
        return f"{self.operation}.{self.name}"

    def request(self, holder: Holder, number: str) -> bytes:
        """The request's body with `number` (a JSON number's text) as the field's value."""
        body = {**self.body(holder), self.name: PLACEHOLDER}
        return json.dumps(body).replace(f'"{PLACEHOLDER}"', number).encode()


def buy(holder: Holder) -> dict[str, Any]:
    return {
        "customerCode": holder["code"],
        "currencyCode": "EUR",
        "cryptoCode": "BTC",
        "fiatValue": 100,
        "destinationAddress": holder["address"],
        "paymentMethodCode": "BANK_EUR_BUY",
    }


def sell(holder: Holder) -> dict[str, Any]:
    return {
        "customerCode": holder["code"],
        "accountCode": holder["account"],
        "currencyCode": "EUR",
        "cryptoCode": "BTC",
        "paymentMethodCode": "BANK_EUR_SELL",
    }


def sell_at_price(holder: Holder) -> dict[str, Any]:
    return {**sell(holder), "cryptoAmount": 0.001}


def account_buy(holder: Holder) -> dict[str, Any]:
    return {"accountCode": holder["account"], "paymentMethodCode": "BANK_EUR_BUY"}


def account_sell(holder: Holder) -> dict[str, Any]:
    return {"accountCode": holder["account"], "paymentMethodCode": "BANK_EUR_SELL"}


def deposit(_: Holder) -> dict[str, Any]:
    return {"cryptoCode": "BTC", "address": DEPOSIT_ADDRESS, "txId": "bounds-1", "confirmations": 1}


def opening_balance(_: Holder) -> dict[str, Any]:
    return {"kind": "OpeningBalance", "code": "BTC", "toReserve": {"name": "hot-wallet", "type": "HotWallet"}}


def _trades() -> list[AmountField]:
    fields = []
    for suffix, verb in (("/simulate", "simulate"), ("", "create")):
        fields += [
            AmountField(f"{verb}BrokerBuy", "broker", "POST", f"/brokerbuy{suffix}", "fiatValue", buy),
            AmountField(f"{verb}BrokerBuy", "broker", "POST", f"/brokerbuy{suffix}", "requestedPrice", buy),
            AmountField(f"{verb}AccountBuy", "broker", "POST", f"/buy/broker{suffix}", "amount", account_buy),
        ]
        path = f"/paymentrequest/brokersell{suffix}"
        fields += [
            AmountField(f"{verb}BrokerSell", "broker", "POST", path, "fiatValue", sell),
            AmountField(f"{verb}BrokerSell", "broker", "POST", path, "cryptoAmount", sell),
            AmountField(f"{verb}BrokerSell", "broker", "POST", path, "requestedPrice", sell_at_price),
        ]
    return fields


AMOUNT_FIELDS: list[AmountField] = [
    *_trades(),
    AmountField("createAccountSell", "broker", "POST", "/sell/broker", "cryptoAmount", account_sell),
    AmountField("reportDeposit", "operator", "POST", "/chain/deposits", "cryptoAmount", deposit),
    AmountField(
        "createReserveAdjustment", "operator", "POST", "/reserves/adjustments", "amount", opening_balance
    ),
]
