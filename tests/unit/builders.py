"""Builders for unit tests: orders priced by the real quote rules, transactions in each status, and an
in-memory event store that stores value objects as the ledger does."""

from __future__ import annotations

import copy
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from eventsourcing.application import Application
from eventsourcing.domain import Aggregate
from eventsourcing.persistence import JSONTranscoder

from application.store.transcodings import register_value_objects
from domain.errors import DomainError
from domain.money import Asset
from domain.pricing import Terms, quote_buy, quote_sell_of_crypto
from domain.transaction import ChainPayment, Order, Status, Transaction, TransactionType

NOW = datetime(2026, 11, 21, 10, 0, tzinfo=UTC)
VALID_UNTIL = NOW + timedelta(minutes=30)
LATER = NOW + timedelta(minutes=5)
EUR = Asset("EUR", 2)
BTC = Asset("BTC", 8)
TERMS = Terms(
    fiat=EUR,
    crypto=BTC,
    fee_rate=Decimal("0.01"),
    bank_fee=Decimal("0.50"),
    network_fee=Decimal("0.0001"),
    wiggle_up=Decimal("0.10"),
    wiggle_down=Decimal("0.05"),
)
REQUIRED = 3


class Store(Application):
    """The popo event store, with the ledger's transcodings of value objects."""

    def register_transcodings(self, transcoder: JSONTranscoder) -> None:
        super().register_transcodings(transcoder)
        register_value_objects(transcoder)


def store() -> Store:
    return Store(env={"PERSISTENCE_MODULE": "eventsourcing.popo"})


def order(
    kind: TransactionType,
    partner: str = "partner-a",
    code: str = "TX0001",
    data: dict[str, str] | None = None,
) -> Order:
    if kind == TransactionType.BUY:
        quote = quote_buy(TERMS, Decimal("50000"), Decimal("100.00"))
    else:
        quote = quote_sell_of_crypto(TERMS, Decimal("48000"), Decimal("0.01000000"))
    return Order(
        partner=partner,
        code=code,
        type=kind,
        customer_code="CUST1",
        account_code="AC1",
        crypto="BTC",
        currency="EUR",
        payment_method="BANK_EUR",
        destination_address="bc1qexample",
        quote=quote,
        limit_amount=quote.fiat_value,
        data=data or {},
    )


def staged_buy(**kwargs: Any) -> Transaction:
    return Transaction.stage_buy(order(TransactionType.BUY, **kwargs), NOW, VALID_UNTIL)


def sending_buy() -> Transaction:
    buy = staged_buy()
    buy.commit(LATER)
    return buy


def initiated_sell(**kwargs: Any) -> Transaction:
    return Transaction.initiate_sell(order(TransactionType.SELL, **kwargs), NOW, VALID_UNTIL)


def deposit(sell: Transaction, confirmations: int = REQUIRED, tx_id: str = "tx-1") -> ChainPayment:
    """The customer's payment of exactly the expected amount."""
    return ChainPayment(tx_id, confirmations, sell.order.quote.crypto_amount)


def sell_in(status: Status) -> Transaction:
    """A sell brought to `status` by the commands that lead there."""
    sell = initiated_sell()
    if status == Status.CONFIRMING:
        sell.report_deposit(deposit(sell, confirmations=1), REQUIRED, True, LATER)
    elif status == Status.TO_PAYOUT:
        sell.report_deposit(deposit(sell), REQUIRED, True, LATER)
    elif status == Status.PAYOUT_CONFIRMING:
        sell.report_deposit(deposit(sell), REQUIRED, True, LATER)
        sell.confirm_payout(True, LATER, "ref-1", None)
    elif status == Status.COMPLETED:
        sell.report_deposit(deposit(sell), REQUIRED, False, LATER)
    elif status == Status.BLOCKED:
        wrong = ChainPayment("tx-1", REQUIRED, sell.order.quote.crypto_amount + BTC.quantum)
        sell.report_deposit(wrong, REQUIRED, True, LATER)
    elif status == Status.CANCELLED:
        sell.expire(VALID_UNTIL + timedelta(seconds=1))
    assert sell.status == status
    return sell


def assert_refused(
    aggregate: Aggregate, error: type[DomainError], command: Callable[[], object]
) -> DomainError:
    """The command raises `error` and the aggregate is exactly as it was: no event, no change."""
    before = copy.deepcopy(aggregate)
    with pytest.raises(error) as caught:
        command()
    assert aggregate.version == before.version
    assert aggregate.__dict__ == before.__dict__
    return caught.value


def assert_nothing_recorded(aggregate: Aggregate, command: Callable[[], object]) -> None:
    """The command is accepted and changes nothing."""
    before = copy.deepcopy(aggregate)
    command()
    assert aggregate.__dict__ == before.__dict__
