"""Request bodies of the alternative buy and sell endpoints."""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec

from interface.http.shapes import EXAMPLE_ACCOUNT, Amount, Body, Code, Currency, example

AccountCode = Annotated[str, Code, example(EXAMPLE_ACCOUNT)]
PaymentMethodCode = Annotated[str, Code, example("BANK_EUR_BUY")]
Ip = Annotated[str, msgspec.Meta(max_length=64, description="the customer's IP address, for logging")]


# Typed as a double by the interface: read at 15 significant digits, then exact at the asset's scale.
DoubleAmount = Annotated[
    Amount,
    msgspec.Meta(
        description="a JSON number above zero, typed as a double: read at 15 significant digits "
        "(50.309999999999995 is 50.31), then it must fit the asset's scale (422 amount_too_precise)"
    ),
]


class AccountBuySimulation(Body):
    payment_method_code: PaymentMethodCode
    account_code: AccountCode
    amount: DoubleAmount
    currency: (
        Annotated[
            Currency,
            msgspec.Meta(
                description="the payment method's currency when left out; given, it must be that currency "
                "(422 payment_method_mismatch otherwise)"
            ),
        ]
        | None
    ) = None


class AccountBuy(AccountBuySimulation):
    ip: Ip | None = None


class Execution(Body):
    transaction_code: Annotated[str, Code]
    result_code: Literal["PAYMENTSUCCESS", "PAYMENTFAILED", "PAYMENTCANCELLED"]


class AccountSell(Body):
    account_code: AccountCode
    payment_method_code: Annotated[str, Code, example("BANK_EUR_SELL")]
    crypto_amount: DoubleAmount
    ip: Ip | None = None


class SellStatusUpdate(Body):
    status_code: Literal["PayoutConfirming", "SellCompleted"]
