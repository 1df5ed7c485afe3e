"""The transaction's outward shape, defined once (`domain.transaction_view`): what it takes from the
aggregate, and the `read.transactions` table derived from its fields."""

from __future__ import annotations

import re
from datetime import datetime
from decimal import Decimal
from typing import get_args, get_type_hints

from domain.transaction import Status, Transaction, TransactionType
from domain.transaction_view import (
    FIELDS,
    TransactionView,
    shows_valid_until,
    simulated_view,
    stored_view,
    transaction_view,
)
from projections.read_tables import TRANSACTIONS, column_definition
from tests.unit.builders import (
    LATER,
    NOW,
    VALID_UNTIL,
    initiated_sell,
    order,
    sell_in,
    sending_buy,
    staged_buy,
)

COLUMN = re.compile(r"^\s+(\w+) (\w+)(.*?),?$", re.MULTILINE)


def table_columns() -> dict[str, tuple[str, bool]]:
    """The columns of read.transactions as the CREATE statement defines them: name -> (type, nullable)."""
    return {
        name: (kind, "NOT NULL" not in rest)
        for name, kind, rest in COLUMN.findall(TRANSACTIONS)
        if name != "PRIMARY"
    }


def test_a_sell_paid_out_shows_its_quote_payment_and_payout_in_the_view():
    sell = sell_in(Status.PAYOUT_CONFIRMING)
    view = transaction_view(sell)
    quote, fees = sell.order.quote, sell.order.quote.fees
    assert (view.partner, view.transaction_code, view.id) == ("partner-a", "TX0001", sell.id)
    assert (view.type, view.status) == (TransactionType.SELL, Status.PAYOUT_CONFIRMING)
    assert (view.crypto_amount, view.fiat_value, view.crypto_price) == (
        quote.crypto_amount,
        quote.fiat_value,
        quote.price,
    )
    assert (view.partner_fee_crypto, view.bank_fee_fiat, view.network_fee_crypto) == (
        fees.partner_crypto,
        fees.bank_fiat,
        fees.network_crypto,
    )
    assert (view.balance_crypto, view.balance_fiat) == (-quote.crypto_amount, quote.fiat_value)
    assert (view.blockchain_tx_id, view.received_crypto_amount) == ("tx-1", quote.crypto_amount)
    assert (view.payout_reference, view.created, view.updated) == ("ref-1", NOW, LATER)


def test_a_buy_moves_no_balance_and_keeps_no_address_it_was_not_given():
    buy = sending_buy()
    view = transaction_view(buy)
    assert (view.balance_crypto, view.balance_fiat) == (Decimal(0), Decimal(0))
    assert view.status == Status.SENDING
    sell_view = transaction_view(initiated_sell())
    assert sell_view.destination_address == "bc1qexample"
    simulated = simulated_view(order(TransactionType.SELL), NOW)
    assert simulated.status == Status.SIMULATED and simulated.valid_until is None


def test_valid_until_is_shown_for_sells_and_for_staged_buys_only():
    assert shows_valid_until(transaction_view(staged_buy()))
    assert not shows_valid_until(transaction_view(sending_buy()))
    assert shows_valid_until(transaction_view(sell_in(Status.COMPLETED)))


def test_a_view_read_back_from_its_fields_is_the_same_view():
    view = transaction_view(sell_in(Status.BLOCKED))
    row = {**{name: getattr(view, name) for name in FIELDS}, "version": 3, "previous_status": "Initiated"}
    assert stored_view(row) == view


def test_the_transactions_table_has_a_column_per_view_field_in_its_order():
    columns = list(table_columns())
    row_only = ["previous_status", "version", "notification_id"]
    assert [name for name in columns if name not in row_only] == list(FIELDS)
    assert columns[columns.index("status") + 1] == "previous_status"
    assert columns[-2:] == ["version", "notification_id"]


def test_each_column_has_the_sql_type_of_its_field_and_is_nullable_when_the_field_may_be_none():
    columns = table_columns()
    assert columns["id"] == ("uuid", False)
    assert columns["account_code"] == ("text", True)
    assert columns["data"] == ("jsonb", False)
    assert columns["requested_price"] == ("numeric", True)
    assert columns["crypto_amount"] == ("numeric", False)
    assert columns["valid_until"] == ("timestamptz", True)
    assert columns["confirmations"] == ("integer", True)
    hints = get_type_hints(TransactionView)
    for name in FIELDS:
        assert columns[name][1] == (type(None) in get_args(hints[name])), name


def test_a_field_of_a_new_kind_gets_its_column_from_its_annotation():
    assert column_definition("paid_at", datetime | None) == "paid_at timestamptz"
    assert column_definition("fee", Decimal) == "fee numeric NOT NULL"
    assert column_definition("note", str | None) == "note text"


def test_the_view_of_a_created_transaction_is_the_view_of_its_first_event():
    buy = Transaction.send_buy(order(TransactionType.BUY), NOW, VALID_UNTIL)
    first = buy.collect_events()[0]
    opening = transaction_view(first.mutate(None))
    assert opening.status == Status.SENDING  # a buy created without `stage` is never shown Staged
    assert opening == transaction_view(buy)
