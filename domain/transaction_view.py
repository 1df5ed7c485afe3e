"""The transaction as the outside world sees it, defined once: `TransactionView`.

Every view of a transaction is made from this one shape: the HTTP presenters
(`interface.shared.transaction_presenters`) render a
view, whether it was computed from the aggregate here or read back from the read model, and the read model's
`read.transactions` table (`projections.read_tables`) has one column per field of it (its names and SQL types
derived from the fields), so a field added here is a column of the table and a value every presenter can show.
Amounts are the exact Decimals of the quote; scaling them for display is the presenters' business.
"""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from uuid import UUID

import msgspec

from domain.transaction import (
    ChainPayment,
    Order,
    Status,
    Transaction,
    TransactionType,
    balance_mutation,
)


class TransactionView(msgspec.Struct, kw_only=True, frozen=True):
    """A transaction's fields by their outward names, in the order of the columns of `read.transactions`."""

    partner: str
    transaction_code: str
    id: UUID
    type: str
    status: str
    customer_code: str
    account_code: str | None
    crypto_code: str
    currency_code: str
    payment_method_code: str
    destination_address: str | None
    deposit_path: str | None
    payment_reference: str | None  # the partner's, given with the order
    callback_url: str | None
    customer_ip: str | None
    data: dict[str, str]
    requested_crypto_amount: Decimal | None
    requested_fiat_value: Decimal | None
    requested_price: Decimal | None
    crypto_amount: Decimal
    fiat_value: Decimal
    crypto_price: Decimal
    crypto_value: Decimal
    partner_fee_fiat: Decimal
    partner_fee_crypto: Decimal
    bank_fee_fiat: Decimal
    bank_fee_crypto: Decimal
    network_fee_fiat: Decimal
    network_fee_crypto: Decimal
    balance_crypto: Decimal
    balance_fiat: Decimal
    limit_amount: Decimal
    created: datetime
    updated: datetime
    valid_until: datetime | None
    blockchain_tx_id: str | None = None
    confirmations: int | None = None
    received_crypto_amount: Decimal | None = None
    payout_reference: str | None = None  # the operator's, given with the payout
    customer_bank_account_id: str | None = None
    cancel_reason: str | None = None
    resolution: str | None = None  # the operator's, for a BLOCKED sell or a late payment
    resolution_reason: str | None = None
    refund_address: str | None = None
    refund_crypto_amount: Decimal | None = None  # what is sent back: the amount received less the fee
    refund_network_fee: Decimal | None = None
    refund_tx_id: str | None = None  # the refund's sendout


FIELDS: tuple[str, ...] = TransactionView.__struct_fields__


def transaction_view(tx: Transaction) -> TransactionView:
    """The view of a recorded transaction, as its aggregate now stands."""
    return order_view(
        tx.order,
        id=tx.id,
        status=tx.status,
        created=tx.created,
        updated=tx.updated,
        valid_until=tx.valid_until,
        payment=tx.payment,
        payout_reference=tx.payout_reference,
        customer_bank_account_id=tx.customer_bank_account_id,
        cancel_reason=tx.cancel_reason,
        resolved=resolved(tx),
    )


def resolved(tx: Transaction) -> dict[str, object]:
    """The view's fields of the operator's resolution, None where there is none."""
    return {
        "resolution": tx.resolution,
        "resolution_reason": tx.resolution_reason,
        "refund_address": tx.refund_address,
        "refund_crypto_amount": tx.refund_amount,
        "refund_network_fee": tx.refund_network_fee,
        "refund_tx_id": tx.refund_payment.tx_id if tx.refund_payment else None,
    }


def simulated_view(order: Order, at: datetime) -> TransactionView:
    """The view of a priced order that is not recorded (status SIMULATED): no validity, no payment."""
    id_ = Transaction.create_id(order.partner, order.code)
    return order_view(order, id=id_, status=Status.SIMULATED, created=at, updated=at, valid_until=None)


def order_view(
    order: Order,
    *,
    id: UUID,
    status: str,
    created: datetime,
    updated: datetime,
    valid_until: datetime | None,
    payment: ChainPayment | None = None,
    payout_reference: str | None = None,
    customer_bank_account_id: str | None = None,
    cancel_reason: str | None = None,
    resolved: dict[str, object] | None = None,
) -> TransactionView:
    return TransactionView(  # type: ignore[arg-type]
        partner=order.partner,
        transaction_code=order.code,
        id=id,
        type=str(order.type),
        status=status,
        customer_code=order.customer_code,
        account_code=order.account_code,
        crypto_code=order.crypto,
        currency_code=order.currency,
        payment_method_code=order.payment_method,
        destination_address=order.destination_address or None,
        deposit_path=order.deposit_path,
        payment_reference=order.payment_reference,
        callback_url=order.callback_url,
        customer_ip=order.customer_ip,
        data=dict(order.data),
        **priced(order),
        created=created,
        updated=updated,
        valid_until=valid_until,
        blockchain_tx_id=payment.tx_id if payment else None,
        confirmations=payment.confirmations if payment else None,
        received_crypto_amount=payment.amount if payment else None,
        payout_reference=payout_reference,
        customer_bank_account_id=customer_bank_account_id,
        cancel_reason=cancel_reason,
        **(resolved or {}),
    )


def priced(order: Order) -> dict[str, Decimal | None]:
    """The view's fields that the order's quote sets (a BLOCKED sell's accepted amount sets them again)."""
    quote, fees = order.quote, order.quote.fees
    crypto_mutation, fiat_mutation = balance_mutation(order)
    return dict(
        requested_crypto_amount=quote.requested_crypto,
        requested_fiat_value=quote.requested_fiat,
        requested_price=quote.requested_price,
        crypto_amount=quote.crypto_amount,
        fiat_value=quote.fiat_value,
        crypto_price=quote.price,
        crypto_value=quote.crypto_value,
        partner_fee_fiat=fees.partner_fiat,
        partner_fee_crypto=fees.partner_crypto,
        bank_fee_fiat=fees.bank_fiat,
        bank_fee_crypto=fees.bank_crypto,
        network_fee_fiat=fees.network_fiat,
        network_fee_crypto=fees.network_crypto,
        balance_crypto=crypto_mutation,
        balance_fiat=fiat_mutation,
        limit_amount=order.limit_amount,
    )


def stored_view(values: dict[str, object]) -> TransactionView:
    """The view out of a mapping that holds its fields by name (a row of `read.transactions`, say); other
    keys are left out."""
    return TransactionView(**{name: values[name] for name in FIELDS})  # type: ignore[arg-type]


def shows_valid_until(view: TransactionView) -> bool:
    """validUntil is shown for every sell and for a buy while it is Staged (the quote it may be committed
    within); a buy sent or cancelled has no validity left to show."""
    return view.type == TransactionType.SELL or view.status == Status.STAGED
