"""Bodies of customers and their accounts and limits (see contract-notes.md for every field)."""

from __future__ import annotations

from decimal import Decimal
from typing import Annotated, Literal

from interface.http.shapes import (
    Address,
    Body,
    Code,
    CryptoCode,
    Currency,
    CustomerCode,
    Timestamp,
    example,
)


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


class Account(Body):
    account_code: str
    customer_code: str
    account_status: str
    dc_code: str
    customer_crypto_address: str
    dc_receive_address: str
    derivation_path: str
    created: Timestamp


class Customer(Body):
    customer_code: str
    portfolio_code: str | None
    trust_level: str
    status: str
    currency_code: str | None
    created: Timestamp
    accounts: list[Account]


class Limit(Body):
    direction: str
    period: str
    period_key: str
    limit: Decimal
    used: Decimal
    remaining: Decimal


class Limits(Body):
    customer_code: str
    trust_level: str
    currency_code: str
    limits: list[Limit]
