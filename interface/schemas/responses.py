"""Response bodies of the broker interface (see contract-notes.md for every field)."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from typing import Annotated, Any

import msgspec

from interface.schemas.base import Body

Timestamp = Annotated[datetime, msgspec.Meta(tz=True)]


class Problem(msgspec.Struct, kw_only=True, frozen=True):
    """RFC 9457 problem details, with a stable `code` and one line per problem in `errors`."""

    type: str
    title: str
    status: int
    detail: str
    code: str
    errors: list[str]


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


class Amounts(Body):
    crypto_amount: Decimal | None
    fiat_value: Decimal | None
    crypto_price: Decimal | None


class Fees(Body):
    partner_fee_fiat: Decimal
    partner_fee_crypto: Decimal
    bank_fee_fiat: Decimal
    bank_fee_crypto: Decimal
    network_fee_fiat: Decimal
    network_fee_crypto: Decimal


class BalanceMutation(Body):
    crypto: Decimal
    fiat: Decimal


class Transaction(Body):
    transaction_code: str
    type: str
    status: str
    customer_code: str
    account_code: str | None
    crypto_code: str
    currency_code: str
    payment_method_code: str
    destination_crypto_address: str | None
    requested_amounts: Amounts
    executed_amounts: Amounts
    fees: Fees
    balance_mutation: BalanceMutation
    payment_reference: str | None
    data: dict[str, str] | None
    created: Timestamp
    updated: Timestamp
    valid_until: Timestamp | None = None
    blockchain_transaction_id: str | None = None
    confirmations: int | None = None


class TransactionEnvelope(Body):
    transaction: Transaction


class TransactionPage(Body):
    """One page of a partner's transactions, newest first."""

    page: int
    page_size: int
    total: int
    total_pages: int
    records: list[Transaction]


class TransactionEvent(Body):
    """One event of a transaction: its version, kind, when it happened by the ledger's clock (the time that
    `created` and `updated` show and that `asOf` compares with), and its fields."""

    version: int
    type: str
    timestamp: Timestamp
    data: dict[str, Any]


class TransactionHistory(Body):
    """Every event of a transaction up to `asOf` (all when absent), and the transaction as it stood then."""

    transaction_code: str
    as_of: Timestamp | None
    transaction: Transaction
    events: list[TransactionEvent]


class CryptoPrice(Body):
    buy: Decimal
    sell: Decimal
    updated: Timestamp


class Prices(Body):
    currency_code: str
    created: Timestamp
    prices: dict[str, CryptoPrice]


class Token(msgspec.Struct, kw_only=True, frozen=True):
    access_token: str
    token_type: str
    expires_in: int
    scope: str
