"""From domain objects to response bodies. Amounts stay Decimal; fiat is shown at its minor unit."""

from __future__ import annotations

import dataclasses
import math
from datetime import UTC, datetime
from decimal import Decimal
from enum import Enum
from typing import Any
from uuid import UUID

import msgspec
from eventsourcing.domain import DomainEvent

from application.commands import LimitUsage
from application.settings import Settings
from domain.account import Account
from domain.customer import Customer
from domain.money import Asset
from domain.pricing import Price
from domain.transaction import Order, Status, Transaction, balance_mutation
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
                limit=_fiat(base, u.limit),
                used=_fiat(base, u.used),
                remaining=_fiat(base, u.remaining),
            )
            for u in usages
        ],
    )


def transaction(settings: Settings, tx: Transaction) -> r.TransactionEnvelope:
    payment = tx.payment
    body = _transaction_body(settings, tx.order, tx.status, tx.created, tx.updated)
    body = _with(
        body,
        valid_until=tx.valid_until if tx.order.type == "BROKERSELL" or tx.status == Status.STAGED else None,
        blockchain_transaction_id=payment.tx_id if payment else None,
        confirmations=payment.confirmations if payment else None,
    )
    return r.TransactionEnvelope(transaction=body)


def simulation(settings: Settings, order: Order, at: datetime) -> r.TransactionEnvelope:
    return r.TransactionEnvelope(transaction=_transaction_body(settings, order, Status.SIMULATED, at, at))


def _with(body: r.Transaction, **changes: object) -> r.Transaction:
    return msgspec.structs.replace(body, **changes)


def _transaction_body(
    settings: Settings, order: Order, status: str, created: datetime, updated: datetime
) -> r.Transaction:
    fiat = settings.fiat(order.currency)
    quote = order.quote
    fees = quote.fees
    crypto_mutation, fiat_mutation = balance_mutation(order)
    return r.Transaction(
        transaction_code=order.code,
        type=order.type,
        status=status,
        customer_code=order.customer_code,
        account_code=order.account_code,
        crypto_code=order.crypto,
        currency_code=order.currency,
        payment_method_code=order.payment_method,
        destination_crypto_address=order.destination_address or None,
        requested_amounts=r.Amounts(
            crypto_amount=quote.requested_crypto,
            fiat_value=_fiat(fiat, quote.requested_fiat),
            crypto_price=quote.requested_price,
        ),
        executed_amounts=r.Amounts(
            crypto_amount=quote.crypto_amount,
            fiat_value=_fiat(fiat, quote.fiat_value),
            crypto_price=quote.price,
        ),
        fees=r.Fees(
            partner_fee_fiat=_fiat(fiat, fees.partner_fiat),
            partner_fee_crypto=fees.partner_crypto,
            bank_fee_fiat=_fiat(fiat, fees.bank_fiat),
            bank_fee_crypto=fees.bank_crypto,
            network_fee_fiat=_fiat(fiat, fees.network_fiat),
            network_fee_crypto=fees.network_crypto,
        ),
        balance_mutation=r.BalanceMutation(crypto=crypto_mutation, fiat=_fiat(fiat, fiat_mutation)),
        payment_reference=order.payment_reference,
        data=order.data or None,
        created=created,
        updated=updated,
    )


def transaction_row(settings: Settings, row: dict[str, Any]) -> r.Transaction:
    """A transaction as the read model `read.transactions` holds it, in the same shape as `transaction`."""
    fiat = settings.fiat(row["currency_code"])
    shows_valid_until = row["type"] == "BROKERSELL" or row["status"] == Status.STAGED
    return r.Transaction(
        transaction_code=row["transaction_code"],
        type=row["type"],
        status=row["status"],
        customer_code=row["customer_code"],
        account_code=row["account_code"],
        crypto_code=row["crypto_code"],
        currency_code=row["currency_code"],
        payment_method_code=row["payment_method_code"],
        destination_crypto_address=row["destination_address"],
        requested_amounts=r.Amounts(
            crypto_amount=row["requested_crypto_amount"],
            fiat_value=_fiat(fiat, row["requested_fiat_value"]),
            crypto_price=row["requested_price"],
        ),
        executed_amounts=r.Amounts(
            crypto_amount=row["crypto_amount"],
            fiat_value=_fiat(fiat, row["fiat_value"]),
            crypto_price=row["crypto_price"],
        ),
        fees=r.Fees(
            partner_fee_fiat=_fiat(fiat, row["partner_fee_fiat"]),
            partner_fee_crypto=row["partner_fee_crypto"],
            bank_fee_fiat=_fiat(fiat, row["bank_fee_fiat"]),
            bank_fee_crypto=row["bank_fee_crypto"],
            network_fee_fiat=_fiat(fiat, row["network_fee_fiat"]),
            network_fee_crypto=row["network_fee_crypto"],
        ),
        balance_mutation=r.BalanceMutation(
            crypto=row["balance_crypto"], fiat=_fiat(fiat, row["balance_fiat"])
        ),
        payment_reference=row["payment_reference"],
        data=row["data"] or None,
        created=_utc(row["created"]),
        updated=_utc(row["updated"]),
        valid_until=_utc(row["valid_until"]) if shows_valid_until else None,
        blockchain_transaction_id=row["blockchain_tx_id"],
        confirmations=row["confirmations"],
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
    return r.TransactionHistory(
        transaction_code=tx.code,
        as_of=as_of,
        transaction=transaction(settings, tx).transaction,
        events=[
            r.TransactionEvent(
                version=event.originator_version,
                type=type(event).__name__,
                timestamp=event.timestamp,
                data={k: _plain(v) for k, v in vars(event).items() if k not in EVENT_METADATA},
            )
            for event in events
        ],
    )


def _plain(value: Any) -> Any:
    """An event's field as JSON data: value objects as objects of their fields, amounts stay Decimal."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, UUID):
        return str(value)
    return value


def _utc(at: datetime | None) -> datetime | None:
    return None if at is None else at.astimezone(UTC)


def _fiat(asset: Asset, amount: Decimal | int | None) -> Decimal | None:
    """Fiat at its minor unit. The ledger may give a plain int (0 when a limit window is still unused)."""
    return None if amount is None else Decimal(amount).quantize(asset.quantum)


def prices(currency: str, at: datetime, price_list: dict[str, Price]) -> r.Prices:
    return r.Prices(
        currency_code=currency,
        created=at,
        prices={
            code: r.CryptoPrice(buy=p.buy, sell=p.sell, updated=p.updated) for code, p in price_list.items()
        },
    )
