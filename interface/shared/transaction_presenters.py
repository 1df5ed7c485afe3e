"""From a transaction (its aggregate, a read model's row, an order, its events) to the transaction as every
endpoint presents it (`interface.shared.transaction_shapes`). Amounts stay Decimal; fiat is shown at its minor
unit."""

from __future__ import annotations

import dataclasses
import math
from datetime import UTC, datetime
from decimal import Decimal
from enum import Enum
from typing import Any
from uuid import UUID

from eventsourcing.domain import DomainEvent
from msgspec import UNSET

from application.history import happened_at
from application.settings import Settings
from application.store.actors import ACTOR_KEY, actor_of
from domain.money import Asset
from domain.transaction import Order, Transaction
from domain.transaction_view import (
    TransactionView,
    shows_valid_until,
    simulated_view,
    stored_view,
    transaction_view,
)
from interface.shared import transaction_shapes as r


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
            crypto_amount=crypto.written(view.requested_crypto_amount),
            fiat_value=fiat.written(view.requested_fiat_value),
            crypto_price=fiat.written(view.requested_price),
        ),
        executed_amounts=r.Amounts(
            crypto_amount=crypto.written(view.crypto_amount),
            fiat_value=fiat.written(view.fiat_value),
            crypto_price=fiat.written(view.crypto_price),
        ),
        fees=r.Fees(
            partner_fee_fiat=fiat.written(view.partner_fee_fiat),
            partner_fee_crypto=crypto.written(view.partner_fee_crypto),
            bank_fee_fiat=fiat.written(view.bank_fee_fiat),
            bank_fee_crypto=crypto.written(view.bank_fee_crypto),
            network_fee_fiat=fiat.written(view.network_fee_fiat),
            network_fee_crypto=crypto.written(view.network_fee_crypto),
        ),
        balance_mutation=r.BalanceMutation(
            crypto=crypto.written(view.balance_crypto), fiat=fiat.written(view.balance_fiat)
        ),
        payment_reference=view.payout_reference or view.payment_reference,  # the payout's, once given
        data=view.data or None,
        created=_utc(view.created),
        updated=_utc(view.updated),
        valid_until=_utc(view.valid_until) if shows_valid_until(view) else None,
        blockchain_transaction_id=view.blockchain_tx_id,
        confirmations=view.confirmations,
        resolution=_resolution(view, crypto) if view.resolution else UNSET,
    )


def _resolution(view: TransactionView, crypto: Asset) -> r.Resolution:
    return r.Resolution(
        resolution=view.resolution or "",
        reason=view.resolution_reason,
        refund_address=view.refund_address,
        refund_crypto_amount=crypto.written(view.refund_crypto_amount),
        refund_network_fee=crypto.written(view.refund_network_fee),
        refund_blockchain_transaction_id=view.refund_tx_id,
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


EVENT_METADATA = frozenset(
    {"originator_id", "originator_version", "timestamp", "originator_topic", ACTOR_KEY}
)


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
                actor=dict(actor_of(event) or {}) or UNSET,
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
    | {"network_fee", "kept"}
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
        return scales[name].written(value)
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
