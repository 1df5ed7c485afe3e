"""Request bodies of the broker interface."""

from __future__ import annotations

from decimal import Decimal
from typing import Annotated, Literal

import msgspec

from interface.schemas.base import (
    EXAMPLE_ACCOUNT,
    EXAMPLE_ADDRESS,
    EXAMPLE_CUSTOMER,
    Body,
    Code,
    Text,
    example,
)

CustomerCode = Annotated[str, Code, example(EXAMPLE_CUSTOMER)]
Currency = Annotated[str, msgspec.Meta(min_length=3, max_length=3, pattern=r"^[A-Z]{3}\Z"), example("EUR")]
CryptoCode = Annotated[
    str, msgspec.Meta(min_length=2, max_length=10, pattern=r"^[A-Z0-9]+\Z"), example("BTC")
]
Address = Annotated[str, msgspec.Meta(min_length=1, max_length=128), example(EXAMPLE_ADDRESS)]
# A blockchain's transaction id: any text without white space (`"t-1\n"` would be a second report of t-1)
TX_ID_PATTERN = r"^\S+\Z"
TxId = Annotated[str, msgspec.Meta(min_length=1, max_length=128, pattern=TX_ID_PATTERN)]
Metadata = Annotated[
    dict[Annotated[str, msgspec.Meta(max_length=64)], Annotated[str, Text]], msgspec.Meta(max_length=32)
]
OptionalText = Annotated[str, Text] | None
Amount = Annotated[
    Decimal,
    # refused when not above zero (422 amount_not_positive, not a schema error): said in the document only
    msgspec.Meta(
        description="decimal amount, a JSON number above zero", extra_json_schema={"exclusiveMinimum": 0}
    ),
]


class TokenForm(msgspec.Struct, kw_only=True, frozen=True):
    """OAuth2 client credentials (RFC 6749 4.4); client_id and client_secret, or HTTP Basic instead."""

    grant_type: Annotated[str, msgspec.Meta(extra_json_schema={"enum": ["client_credentials"]})]
    client_id: Annotated[str, msgspec.Meta(min_length=1, max_length=255)] | None = None
    client_secret: Annotated[str, msgspec.Meta(max_length=255)] | None = None
    scope: Annotated[str, msgspec.Meta(max_length=255, description="roles, space-separated")] | None = None


class CustomerCreate(Body):
    customer_code: CustomerCode
    trust_level: Annotated[str, Code, example("Basic")]
    portfolio_code: Annotated[str, Code] | None = None
    status: Literal["NEW", "ACTIVE"] | None = None
    currency_code: Currency | None = None


class CustomerUpdate(Body):
    status: Literal["ACTIVE"]


class AccountCreate(Body):
    customer_crypto_address: Address
    dc_code: CryptoCode | None = None


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


class ChainDeposit(Body):
    crypto_code: CryptoCode
    address: Address
    tx_id: TxId
    crypto_amount: Amount
    confirmations: Annotated[int, msgspec.Meta(ge=0, le=1_000_000)]


class ChainSendout(Body):
    transaction_code: Annotated[str, Code]
    tx_id: TxId
    confirmations: Annotated[int, msgspec.Meta(ge=0, le=1_000_000)]


# What a body's schema says beyond its fields, merged into the API document by `interface.openapi`.
SCHEMA_RULES = {
    # a token request names the client in the form; a client using HTTP Basic instead may leave both out
    "TokenForm": {"required": ["grant_type", "client_id", "client_secret"]},
}
# Bodies that take exactly one of two fields (else 422 fiat_value_or_crypto_amount_required): the document
# gives them as a oneOf of two schemas, one per field, so generated clients get a type for each.
EXACTLY_ONE_OF = {"BrokerSell": ("fiatValue", "cryptoAmount")}
