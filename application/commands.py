"""What the use cases take: plain values decoded by the interface, already typed, not yet checked."""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal

from domain.transaction import Resolution


@dataclass(frozen=True)
class BuyRequest:
    customer_code: str
    currency: str
    crypto: str
    fiat_value: Decimal
    destination_address: str
    payment_method: str
    account_code: str | None = None
    requested_price: Decimal | None = None
    bank_account_number: str | None = None
    callback_url: str | None = None
    blockchain_message: str | None = None
    payment_reference: str | None = None
    data: dict[str, str] = field(default_factory=dict)
    customer_ip: str | None = None
    fiat_value_name: str = "fiatValue"  # what the client called the amount, for messages


@dataclass(frozen=True)
class SellRequest:
    customer_code: str
    account_code: str
    currency: str
    crypto: str
    payment_method: str
    fiat_value: Decimal | None = None
    crypto_amount: Decimal | None = None
    requested_price: Decimal | None = None
    callback_url: str | None = None
    payment_reference: str | None = None
    data: dict[str, str] = field(default_factory=dict)
    customer_ip: str | None = None


@dataclass(frozen=True)
class DepositReport:
    crypto: str
    address: str
    tx_id: str
    crypto_amount: Decimal
    confirmations: int


@dataclass(frozen=True)
class ResolutionRequest:
    """The operator's resolution of a BLOCKED sell or a late payment (contract-notes.md)."""

    resolution: Resolution
    reason: str
    refund_address: str | None = None


@dataclass(frozen=True)
class SendoutReport:
    transaction_code: str
    tx_id: str
    confirmations: int


@dataclass(frozen=True)
class LimitUsage:
    direction: str  # "buy" or "sell"
    period: str  # "daily" or "monthly"
    key: str  # the calendar day or month, e.g. "2026-11-21" or "2026-11"
    currency: str  # the base currency
    limit: Decimal
    used: Decimal
    remaining: Decimal


@dataclass(frozen=True)
class AdjustmentRequest:
    """An operator's adjustment of the reserves: an opening balance into `to`, or a move from `source`."""

    kind: str  # "OpeningBalance" or "Move"
    asset_code: str  # a fiat currency or crypto-currency of the settings
    amount: Decimal
    to_reserve: str
    to_type: str  # "Exchange", "HotWallet" or "ColdStore"
    from_reserve: str | None = None
    from_type: str | None = None
    note: str | None = None
