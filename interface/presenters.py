"""From domain objects to response bodies. Amounts stay Decimal; fiat is shown at its minor unit."""

from __future__ import annotations

import dataclasses
import math
from datetime import UTC, datetime
from decimal import Decimal
from enum import Enum
from typing import Any
from uuid import UUID

from eventsourcing.domain import DomainEvent

from application.commands import LimitUsage
from application.history import happened_at
from application.settings import Settings
from domain.account import Account
from domain.customer import Customer
from domain.money import WIDE, Asset
from domain.pricing import Price
from domain.transaction import Order, Transaction
from domain.transaction_view import (
    TransactionView,
    shows_valid_until,
    simulated_view,
    stored_view,
    transaction_view,
)
from interface.schemas import responses as r


def account(account: Account) -> r.Account:
    return r.Account(
        account_code=account.code,
        customer_code=account.customer_code,
        account_status=account.status,
        dc_code=account.crypto,
        customer_crypto_address=account.customer_address,
        dc_receive_address=account.deposit_address,
        derivation_path=account.deposit_path,
        created=account.created,
    )


def customer(customer: Customer, accounts: list[Account]) -> r.Customer:
    return r.Customer(
        customer_code=customer.code,
        portfolio_code=customer.portfolio,
        trust_level=customer.trust_level,
        status=customer.status,
        currency_code=customer.currency,
        created=customer.created,
        accounts=[account(a) for a in accounts],
    )


def limits(settings: Settings, customer: Customer, usages: list[LimitUsage]) -> r.Limits:
    base = settings.fiat(settings.base_currency)
    return r.Limits(
        customer_code=customer.code,
        trust_level=customer.trust_level,
        currency_code=usages[0].currency if usages else "",
        limits=[
            r.Limit(
                direction=u.direction,
                period=u.period,
                period_key=u.key,
                limit=_scaled(base, u.limit),
                used=_scaled(base, u.used),
                remaining=_scaled(base, u.remaining),
            )
            for u in usages
        ],
    )


def transaction(settings: Settings, tx: Transaction) -> r.TransactionEnvelope:
    return r.TransactionEnvelope(transaction=transaction_body(settings, transaction_view(tx)))


def simulation(settings: Settings, order: Order, at: datetime) -> r.TransactionEnvelope:
    return r.TransactionEnvelope(transaction=transaction_body(settings, simulated_view(order, at)))


def transaction_row(settings: Settings, row: dict[str, Any]) -> r.Transaction:
    """A transaction as the read model `read.transactions` holds it: the view it stores, shown as any is."""
    return transaction_body(settings, stored_view(row))


def transaction_body(settings: Settings, view: TransactionView) -> r.Transaction:
    """The one rendering of a transaction's view (from the aggregate, a simulation or a read-model row)."""
    fiat = settings.fiat(view.currency_code)
    crypto = settings.crypto_asset(view.crypto_code)
    return r.Transaction(
        transaction_code=view.transaction_code,
        type=view.type,
        status=view.status,
        customer_code=view.customer_code,
        account_code=view.account_code,
        crypto_code=view.crypto_code,
        currency_code=view.currency_code,
        payment_method_code=view.payment_method_code,
        destination_crypto_address=view.destination_address,
        requested_amounts=r.Amounts(
            crypto_amount=_scaled(crypto, view.requested_crypto_amount),
            fiat_value=_scaled(fiat, view.requested_fiat_value),
            crypto_price=_scaled(fiat, view.requested_price),
        ),
        executed_amounts=r.Amounts(
            crypto_amount=_scaled(crypto, view.crypto_amount),
            fiat_value=_scaled(fiat, view.fiat_value),
            crypto_price=_scaled(fiat, view.crypto_price),
        ),
        fees=r.Fees(
            partner_fee_fiat=_scaled(fiat, view.partner_fee_fiat),
            partner_fee_crypto=_scaled(crypto, view.partner_fee_crypto),
            bank_fee_fiat=_scaled(fiat, view.bank_fee_fiat),
            bank_fee_crypto=_scaled(crypto, view.bank_fee_crypto),
            network_fee_fiat=_scaled(fiat, view.network_fee_fiat),
            network_fee_crypto=_scaled(crypto, view.network_fee_crypto),
        ),
        balance_mutation=r.BalanceMutation(
            crypto=_scaled(crypto, view.balance_crypto), fiat=_scaled(fiat, view.balance_fiat)
        ),
        payment_reference=view.payout_reference or view.payment_reference,  # the payout's, once given
        data=view.data or None,
        created=_utc(view.created),
        updated=_utc(view.updated),
        valid_until=_utc(view.valid_until) if shows_valid_until(view) else None,
        blockchain_transaction_id=view.blockchain_tx_id,
        confirmations=view.confirmations,
    )


def transaction_page(
    settings: Settings, page: int, page_size: int, total: int, rows: list[dict[str, Any]]
) -> r.TransactionPage:
    return r.TransactionPage(
        page=page,
        page_size=page_size,
        total=total,
        total_pages=math.ceil(total / page_size),
        records=[transaction_row(settings, row) for row in rows],
    )


EVENT_METADATA = frozenset({"originator_id", "originator_version", "timestamp", "originator_topic"})


def history(
    settings: Settings, tx: Transaction, events: list[DomainEvent], as_of: datetime | None
) -> r.TransactionHistory:
    scales = _event_scales(settings, tx.order)
    return r.TransactionHistory(
        transaction_code=tx.code,
        as_of=as_of,
        transaction=transaction(settings, tx).transaction,
        events=[
            r.TransactionEvent(
                version=event.originator_version,
                type=type(event).__name__,
                timestamp=happened_at(event),  # the time base of created, updated and asOf
                data={k: _plain(v, scales, k) for k, v in vars(event).items() if k not in EVENT_METADATA},
            )
            for event in events
        ],
    )


# The amounts of a transaction's events (the fields of its order, quote, fees and chain payments) by the
# asset they are counted in, so that the history writes them as every response does: at the asset's scale.
FIAT_FIELDS = frozenset(
    {
        "requested_fiat",
        "requested_price",
        "price",
        "fiat_value",
        "crypto_value",
        "partner_fiat",
        "bank_fiat",
        "network_fiat",
    }
)
CRYPTO_FIELDS = frozenset(
    {"requested_crypto", "crypto_amount", "partner_crypto", "bank_crypto", "network_crypto", "amount"}
)
BASE_CURRENCY_FIELDS = frozenset({"limit_amount"})


def _event_scales(settings: Settings, order: Order) -> dict[str, Asset]:
    fiat = settings.fiat(order.currency)
    crypto = settings.crypto_asset(order.crypto)
    base = settings.fiat(settings.base_currency)
    return {
        **dict.fromkeys(FIAT_FIELDS, fiat),
        **dict.fromkeys(CRYPTO_FIELDS, crypto),
        **dict.fromkeys(BASE_CURRENCY_FIELDS, base),
    }


def _plain(value: Any, scales: dict[str, Asset], name: str | None = None) -> Any:
    """An event's field as JSON data: value objects as objects of their fields, amounts stay Decimal and are
    written at their asset's scale (`scales`, by the field's name; the client's own `data` is not scaled)."""
    if isinstance(value, Decimal) and name in scales:
        return _scaled(scales[name], value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name), scales, f.name) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {str(k): _plain(v, {}) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v, scales) for v in value]
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, UUID):
        return str(value)
    return value


def _utc(at: datetime | None) -> datetime | None:
    return None if at is None else at.astimezone(UTC)


def _scaled(asset: Asset, amount: Decimal | int | None) -> Decimal | None:
    """An amount written at its asset's scale (fiat at its minor unit, crypto at its precision), so that
    every amount of one asset has the same number of decimals in a response; a value with more digits than
    the scale (a requested price, say) is written as it is rather than rounded. The ledger may give a plain
    int (0 when a limit window is still unused)."""
    if amount is None:
        return None
    scaled = Decimal(amount).quantize(asset.quantum, context=WIDE)
    return scaled if scaled == amount else Decimal(amount)


def prices(currency: str, at: datetime, price_list: dict[str, Price]) -> r.Prices:
    return r.Prices(
        currency_code=currency,
        created=at,
        prices={
            code: r.CryptoPrice(buy=p.buy, sell=p.sell, updated=p.updated) for code, p in price_list.items()
        },
    )
