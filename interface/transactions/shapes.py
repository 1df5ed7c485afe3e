"""Bodies of buys, sells and payouts, and how a body becomes its use case's command (the transaction as every
endpoint presents it is `interface.shared.transaction_shapes`).

From a request body to the command of its use case, by one declared mapping rather than a copy per field.

A body's field becomes the command's field of the same name, but for the names in `RENAMED` (the API's
`...Code` suffixes the commands leave out); a field the client left out (None) takes the command's default.
The fields in `NOT_IN_COMMAND` say how to run the use case and are handed to it by the controller. A body
field the command does not have is a TypeError, not a value quietly lost (the tests map every body of
`COMMANDS`: `tests/interface/test_body_commands.py`).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, TypeVar

import msgspec

from application.commands import BuyRequest, SellRequest
from interface.http.shapes import (
    EXAMPLE_ACCOUNT,
    Address,
    Amount,
    Body,
    Code,
    CryptoCode,
    Currency,
    CustomerCode,
    Metadata,
    OptionalText,
    example,
)


class BrokerBuy(Body):
    customer_code: CustomerCode
    currency_code: Currency
    crypto_code: CryptoCode
    fiat_value: Annotated[Amount, example(100)]
    destination_address: Address
    payment_method_code: Annotated[str, Code, example("BANK_EUR_BUY")]
    account_code: (
        Annotated[
            str,
            Code,
            msgspec.Meta(
                description="required when no account of the customer has destinationAddress as its address "
                "(422 validation_failed otherwise)"
            ),
        ]
        | None
    ) = None
    bank_account_number: OptionalText = None
    requested_price: Amount | None = None
    callback_url: Annotated[str, msgspec.Meta(max_length=2048)] | None = None
    blockchain_message: OptionalText = None
    data: Metadata | None = None
    payment_reference: OptionalText = None


class BrokerBuyCreate(BrokerBuy):
    stage: bool = False


class BrokerSell(Body):
    customer_code: CustomerCode
    account_code: Annotated[str, Code, example(EXAMPLE_ACCOUNT)]
    currency_code: Currency
    crypto_code: CryptoCode
    payment_method_code: Annotated[str, Code, example("BANK_EUR_SELL")]
    fiat_value: Annotated[Amount, example(100)] | None = None
    crypto_amount: Amount | None = None
    requested_price: Amount | None = None
    callback_url: Annotated[str, msgspec.Meta(max_length=2048)] | None = None
    data: Metadata | None = None
    payment_reference: OptionalText = None


class PayoutUpdate(Body):
    customer_bank_account_id: Annotated[str, msgspec.Meta(pattern=r"^[0-9a-fA-F-]{32,36}\Z")] | None = None
    payment_reference: OptionalText = None


class TransactionResolution(Body):
    """The operator's decision on money a BLOCKED sell or a late payment received (contract-notes.md)."""

    resolution: Literal["AcceptReceived", "Refund"]
    reason: Annotated[str, msgspec.Meta(min_length=1, max_length=500)]
    refund_address: Address | None = None


# Bodies that take exactly one of two fields (else 422 fiat_value_or_crypto_amount_required): the document
# gives them as a oneOf of two schemas, one per field, so generated clients get a type for each.
EXACTLY_ONE_OF = {"BrokerSell": ("fiatValue", "cryptoAmount")}


# --- from a body to its use case's command ---

RENAMED = {"currency_code": "currency", "crypto_code": "crypto", "payment_method_code": "payment_method"}
NOT_IN_COMMAND = frozenset({"stage"})  # BrokerBuyCreate: whether to stage the buy, an argument of create_buy

# Each body (and the bodies derived from it) and the command it maps to.
COMMANDS: dict[type[msgspec.Struct], type[Any]] = {BrokerBuy: BuyRequest, BrokerSell: SellRequest}

Command = TypeVar("Command")


def command_fields(body: msgspec.Struct) -> dict[str, Any]:
    """The body's fields by the command's names: renamed, those left out and those not for it dropped."""
    return {
        RENAMED.get(name, name): value
        for name, value in msgspec.structs.asdict(body).items()
        if value is not None and name not in NOT_IN_COMMAND
    }


def to_command(body: msgspec.Struct, command: type[Command]) -> Command:
    return command(**command_fields(body))


def buy_request(body: BrokerBuy) -> BuyRequest:
    return to_command(body, BuyRequest)


def sell_request(body: BrokerSell) -> SellRequest:
    return to_command(body, SellRequest)
