"""From domain objects to response bodies. Amounts stay Decimal; fiat is shown at its minor unit."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal

import msgspec

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
