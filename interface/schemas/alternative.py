"""Request bodies of the alternative buy and sell endpoints."""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec

from interface.schemas.base import EXAMPLE_ACCOUNT, Body, Code, example
from interface.schemas.requests import Amount, Currency

AccountCode = Annotated[str, Code, example(EXAMPLE_ACCOUNT)]
PaymentMethodCode = Annotated[str, Code, example("BANK_EUR_BUY")]
Ip = Annotated[str, msgspec.Meta(max_length=64, description="the customer's IP address, for logging")]


class AccountBuySimulation(Body):
    payment_method_code: PaymentMethodCode
    account_code: AccountCode
    amount: Amount
    currency: Currency | None = None


class AccountBuy(AccountBuySimulation):
    ip: Ip | None = None


class Execution(Body):
    transaction_code: Annotated[str, Code]
    result_code: Literal["PAYMENTSUCCESS", "PAYMENTFAILED", "PAYMENTCANCELLED"]


class AccountSell(Body):
    account_code: AccountCode
    payment_method_code: Annotated[str, Code, example("BANK_EUR_SELL")]
    crypto_amount: Amount
    ip: Ip | None = None


class SellStatusUpdate(Body):
    status_code: Literal["PayoutConfirming", "SellCompleted"]
