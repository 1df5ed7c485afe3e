"""Request bodies of the broker interface."""

from __future__ import annotations

from decimal import Decimal
from typing import Annotated

import msgspec

from interface.schemas.base import Body, Code, Text

CustomerCode = Annotated[str, Code]
Currency = Annotated[str, msgspec.Meta(min_length=3, max_length=3, pattern=r"^[A-Z]{3}$")]
CryptoCode = Annotated[str, msgspec.Meta(min_length=2, max_length=10, pattern=r"^[A-Z0-9]+$")]
Address = Annotated[str, msgspec.Meta(min_length=1, max_length=128)]
Metadata = Annotated[
    dict[Annotated[str, msgspec.Meta(max_length=64)], Annotated[str, Text]], msgspec.Meta(max_length=32)
]
OptionalText = Annotated[str, Text] | None
Amount = Annotated[Decimal, msgspec.Meta(description="decimal amount, a JSON number")]


class CustomerCreate(Body):
    customer_code: CustomerCode
    trust_level: Annotated[str, Code]
    portfolio_code: Annotated[str, Code] | None = None
    status: str | None = None
    currency_code: Currency | None = None


class CustomerUpdate(Body):
    status: str


class AccountCreate(Body):
    customer_crypto_address: Address
    dc_code: CryptoCode | None = None


class BrokerBuy(Body):
    customer_code: CustomerCode
    currency_code: Currency
    crypto_code: CryptoCode
    fiat_value: Amount
    destination_address: Address
    payment_method_code: Annotated[str, Code]
    account_code: Annotated[str, Code] | None = None
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
    account_code: Annotated[str, Code]
    currency_code: Currency
    crypto_code: CryptoCode
    payment_method_code: Annotated[str, Code]
    fiat_value: Amount | None = None
    crypto_amount: Amount | None = None
    requested_price: Amount | None = None
    callback_url: Annotated[str, msgspec.Meta(max_length=2048)] | None = None
    data: Metadata | None = None
    payment_reference: OptionalText = None


class PayoutUpdate(Body):
    customer_bank_account_id: Annotated[str, msgspec.Meta(pattern=r"^[0-9a-fA-F-]{32,36}$")] | None = None
    payment_reference: OptionalText = None


class ChainDeposit(Body):
    crypto_code: CryptoCode
    address: Address
    tx_id: Annotated[str, msgspec.Meta(min_length=1, max_length=128)]
    crypto_amount: Amount
    confirmations: Annotated[int, msgspec.Meta(ge=0, le=1_000_000)]


class ChainSendout(Body):
    transaction_code: Annotated[str, Code]
    tx_id: Annotated[str, msgspec.Meta(min_length=1, max_length=128)]
    confirmations: Annotated[int, msgspec.Meta(ge=0, le=1_000_000)]
