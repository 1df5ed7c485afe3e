"""Customers, their accounts and their limits, from domain objects to response bodies."""

from __future__ import annotations

from application.commands import LimitUsage
from application.settings import Settings
from domain.account import Account
from domain.customer import Customer
from interface.customers import shapes as r


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
                limit=base.written(u.limit),
                used=base.written(u.used),
                remaining=base.written(u.remaining),
            )
            for u in usages
        ],
    )
