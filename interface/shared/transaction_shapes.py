"""The transaction as every endpoint presents it (see contract-notes.md for every field): one definition for
the transactions' routes, the account-based ones, the chain's reports, the callbacks and the console."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from msgspec import UNSET, UnsetType

from interface.http.shapes import Body, Timestamp


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


class Resolution(Body):
    """The operator's resolution of a BLOCKED sell or a late payment (contract-notes.md): the amount
    received accepted, or refunded less the coin's network fee to `refundAddress`."""

    resolution: str
    reason: str | None
    refund_address: str | None = None
    refund_crypto_amount: Decimal | None = None
    refund_network_fee: Decimal | None = None
    refund_blockchain_transaction_id: str | None = None


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
    # shown only once the operator resolved it (left out, not null, before: UNSET)
    resolution: Resolution | UnsetType = UNSET


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
    `created` and `updated` show and that `asOf` compares with), its fields, and who caused it."""

    version: int
    type: str
    timestamp: Timestamp
    data: dict[str, Any]
    # who caused it (`kind` http: `client`, `roles`, `request`, the X-Request-Id of that request; service:
    # `component`; process: `user`, `command`); left out for an event recorded before actors were
    actor: dict[str, str] | UnsetType = UNSET


class TransactionHistory(Body):
    """Every event of a transaction up to `asOf` (all when absent), and the transaction as it stood then."""

    transaction_code: str
    as_of: Timestamp | None
    transaction: Transaction
    events: list[TransactionEvent]
