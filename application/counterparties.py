"""What buys and sells check alike of who trades: an ACTIVE customer, and an account of that customer in the
request's crypto-currency; and what creating either reads ahead in one query."""

from __future__ import annotations

from datetime import datetime
from uuid import UUID

from application.commands import BuyRequest, SellRequest
from application.limits import window_reads
from application.store.aggregates import AggregateReads, LatestOf
from domain.account import Account
from domain.customer import Customer
from domain.errors import AccountDoesNotFit, AccountNotOfCustomer, CustomerNotActive
from domain.transaction import Transaction


def active_customer(reads: AggregateReads, partner: str, code: str) -> Customer:
    """The customer, as `reads` has it (a use case's read-ahead), refused unless ACTIVE."""
    customer = reads.customer(partner, code)
    if not customer.is_active:
        raise CustomerNotActive(
            f"customer {code} is {customer.status}; activate it with PUT /customer/{code} first"
        )
    return customer


def check_account(
    reads: AggregateReads, partner: str, account: Account, request: BuyRequest | SellRequest
) -> None:
    """The account belongs to the request's customer (as `reads` has it) and holds the request's
    crypto-currency."""
    reads.customer(partner, request.customer_code)
    if account.customer_code != request.customer_code:
        raise AccountNotOfCustomer(
            f"account {account.code} belongs to another customer than {request.customer_code}"
        )
    if account.crypto != request.crypto:
        raise AccountDoesNotFit(
            f"account {account.code} holds {account.crypto}, but cryptoCode is {request.crypto}"
        )


def reads_of_a_create(
    partner: str,
    code: str,
    request: BuyRequest | SellRequest,
    account_code: str,
    direction: str,
    at: datetime,
) -> list[UUID | LatestOf]:
    """What creating a buy or a sell reads: the transaction (if a retry made it), the customer, the account
    and the limit windows (their latest events)."""
    return [
        Transaction.create_id(partner, code),
        Customer.create_id(partner, request.customer_code),
        Account.create_id(partner, account_code),
        *window_reads(partner, request.customer_code, direction, at),
    ]
