"""The transaction: a broker buy or a broker sell, and the state machines they move along.

Buy:  Staged -> Sending (commit) -> COMPLETED (sendout confirmed on chain); Staged -> CANCELLED.
Sell: Initiated -> Confirming -> ToPayout | COMPLETED -> PayoutConfirming -> COMPLETED;
      Initiated -> BLOCKED (payment of another amount) | CANCELLED (no payment before validUntil).
A quote holds up to and including its validUntil (`quote_is_valid`, the one rule of time for both types): a
buy is committed and a sell's payment is first seen within it, or not at all. A payment first seen after it
is recorded against the expired sell (`PaidLate`, CANCELLED) as a payment to refund, never paid out.
Every command checks first and records after; a refused command raises a named error and records nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from enum import StrEnum
from uuid import UUID

from eventsourcing.domain import Aggregate, event

from domain.errors import (
    ChainReportConflict,
    InvalidStateTransition,
    PayoutsFeatureDisabled,
    TransactionExpired,
    TransactionNotStaged,
)
from domain.ids import business_id
from domain.pricing import Quote


class TransactionType(StrEnum):
    BUY = "BROKERBUY"
    SELL = "BROKERSELL"


class Status(StrEnum):
    SIMULATED = "SIMULATED"
    STAGED = "Staged"
    SENDING = "Sending"
    INITIATED = "Initiated"
    CONFIRMING = "Confirming"
    TO_PAYOUT = "ToPayout"
    PAYOUT_CONFIRMING = "PayoutConfirming"
    COMPLETED = "COMPLETED"
    BLOCKED = "BLOCKED"
    CANCELLED = "CANCELLED"


ALLOWED_TRANSITIONS: dict[TransactionType, set[tuple[Status, Status]]] = {
    TransactionType.BUY: {
        (Status.STAGED, Status.SENDING),
        (Status.STAGED, Status.CANCELLED),
        (Status.SENDING, Status.COMPLETED),
    },
    TransactionType.SELL: {
        (Status.INITIATED, Status.CONFIRMING),
        (Status.INITIATED, Status.TO_PAYOUT),
        (Status.INITIATED, Status.COMPLETED),
        (Status.INITIATED, Status.BLOCKED),
        (Status.INITIATED, Status.CANCELLED),
        (Status.CONFIRMING, Status.TO_PAYOUT),
        (Status.CONFIRMING, Status.COMPLETED),
        (Status.TO_PAYOUT, Status.PAYOUT_CONFIRMING),
        (Status.TO_PAYOUT, Status.COMPLETED),
        (Status.PAYOUT_CONFIRMING, Status.COMPLETED),
    },
}
FINAL_STATUSES = frozenset({Status.COMPLETED, Status.CANCELLED, Status.BLOCKED})


def quote_is_valid(valid_until: datetime, at: datetime) -> bool:
    """Whether a quote valid until `valid_until` still holds at `at` (validUntil itself included)."""
    return at <= valid_until


@dataclass(frozen=True)
class Order:
    """Everything a transaction was created with: who, what, where to, and the priced quote."""

    partner: str
    code: str
    type: str
    customer_code: str
    account_code: str | None
    crypto: str
    currency: str
    payment_method: str
    destination_address: str
    quote: Quote
    limit_amount: Decimal  # the volume counted against trust-level limits, in the base currency
    bank_account_number: str | None = None
    callback_url: str | None = None
    blockchain_message: str | None = None
    payment_reference: str | None = None
    data: dict[str, str] = field(default_factory=dict)
    deposit_path: str | None = None  # derivation path of a sell's deposit address
    customer_ip: str | None = None  # as the partner reported it, for logging and analytics


@dataclass(frozen=True)
class ChainPayment:
    """A blockchain transfer seen by the operator's watcher: the customer's deposit or our sendout."""

    tx_id: str
    confirmations: int
    amount: Decimal | None = None


def balance_mutation(order: Order) -> tuple[Decimal, Decimal]:
    """(crypto, fiat): zero for a buy; for a sell the crypto leaving the customer and the payout."""
    if order.type == TransactionType.BUY:
        return Decimal(0), Decimal(0)
    return -order.quote.crypto_amount, order.quote.fiat_value


class Transaction(Aggregate):
    @staticmethod
    def create_id(partner: str, code: str, **_: object) -> UUID:
        return business_id("transaction", partner, code)

    class Staged(Aggregate.Created):
        order: Order
        at: datetime
        valid_until: datetime
        commit_at_once: bool = False  # created without `stage`: Committed follows in the same recording

    class Initiated(Aggregate.Created):
        order: Order
        at: datetime
        valid_until: datetime

    def __init__(
        self, order: Order, at: datetime, valid_until: datetime, commit_at_once: bool = False
    ) -> None:
        self.order = order
        if order.type == TransactionType.SELL:
            self.status = Status.INITIATED
        else:  # a buy created without `stage` is Sending from its first event on: never shown Staged
            self.status = Status.SENDING if commit_at_once else Status.STAGED
        self.committed_at_creation = commit_at_once  # a buy created without `stage`
        self.created = at
        self.updated = at
        self.valid_until = valid_until
        self.payment: ChainPayment | None = None
        self.payout_reference: str | None = None
        self.customer_bank_account_id: str | None = None
        self.cancel_reason: str | None = None

    @classmethod
    def stage_buy(cls, order: Order, at: datetime, valid_until: datetime) -> Transaction:
        _require_type(order, TransactionType.BUY)
        return cls._create(
            cls.Staged,
            id=cls.create_id(order.partner, order.code),
            order=order,
            at=at,
            valid_until=valid_until,
        )

    @classmethod
    def send_buy(cls, order: Order, at: datetime, valid_until: datetime) -> Transaction:
        """A buy created without `stage`: recorded as Staged and Committed, in one recording, and Sending
        from its first event on (its Staged says so), so no view ever shows it Staged."""
        _require_type(order, TransactionType.BUY)
        transaction = cls._create(
            cls.Staged,
            id=cls.create_id(order.partner, order.code),
            order=order,
            at=at,
            valid_until=valid_until,
            commit_at_once=True,
        )
        transaction._commit(at)
        return transaction

    @classmethod
    def initiate_sell(cls, order: Order, at: datetime, valid_until: datetime) -> Transaction:
        _require_type(order, TransactionType.SELL)
        return cls._create(
            cls.Initiated,
            id=cls.create_id(order.partner, order.code),
            order=order,
            at=at,
            valid_until=valid_until,
        )

    @property
    def code(self) -> str:
        return self.order.code

    @property
    def type(self) -> str:
        return self.order.type

    @property
    def is_open(self) -> bool:
        return self.status not in FINAL_STATUSES

    def quote_holds(self, at: datetime) -> bool:
        """Whether its quote still holds at `at` (see `quote_is_valid`)."""
        return quote_is_valid(self.valid_until, at)

    def is_overdue(self, at: datetime) -> bool:
        """Staged buys and unpaid sells lapse at validUntil."""
        return self.status in (Status.STAGED, Status.INITIATED) and not self.quote_holds(at)

    # --- buy -----------------------------------------------------------------------------------------

    def commit(self, at: datetime) -> None:
        if self.status != Status.STAGED:
            raise TransactionNotStaged(
                f"transaction {self.code} is {self.status}; only a Staged buy can be committed"
            )
        if self.is_overdue(at):
            raise TransactionExpired(
                f"transaction {self.code} was valid until {self.valid_until.isoformat()} and can no "
                "longer be committed"
            )
        self._commit(at)

    @event("Committed")
    def _commit(self, at: datetime) -> None:
        self.status = Status.SENDING
        self.updated = at

    def report_sendout(self, payment: ChainPayment, required: int, at: datetime) -> None:
        """Our sendout of a buy seen on chain; confirmed with `required` confirmations it completes."""
        self._require(TransactionType.BUY, "a sendout report")
        if not self._is_news(payment):
            return
        if self.status != Status.SENDING:
            raise self._refused("record a sendout for")
        if payment.confirmations >= required:
            self._complete(at, payment)
        else:
            self._sendout_seen(at, payment)

    @event("SendoutSeen")
    def _sendout_seen(self, at: datetime, payment: ChainPayment) -> None:
        self.payment = payment
        self.updated = at

    # --- sell ----------------------------------------------------------------------------------------

    def report_deposit(self, payment: ChainPayment, required: int, payouts: bool, at: datetime) -> None:
        """The customer's payment to the deposit address, seen with some confirmations. A payment first
        seen after validUntil (whether or not the sweep cancelled the sell yet) is late: whatever its
        amount, the sell is CANCELLED (expired) and the payment recorded against it, to be refunded."""
        self._require(TransactionType.SELL, "a deposit report")
        if not self._is_news(payment):
            return
        if self.status == Status.CANCELLED or (self.status == Status.INITIATED and not self.quote_holds(at)):
            self._paid_late(at, payment)
            return
        if self.status not in (Status.INITIATED, Status.CONFIRMING):
            raise self._refused("record a deposit for")
        if payment.amount != self.order.quote.crypto_amount:
            self._block(at, payment)
        elif payment.confirmations < required:
            self._confirming(at, payment)
        elif payouts:
            self._to_payout(at, payment)
        else:
            self._complete(at, payment)

    @event("Confirming")
    def _confirming(self, at: datetime, payment: ChainPayment) -> None:
        self.status = Status.CONFIRMING
        self.payment = payment
        self.updated = at

    @event("ToPayout")
    def _to_payout(self, at: datetime, payment: ChainPayment) -> None:
        self.status = Status.TO_PAYOUT
        self.payment = payment
        self.updated = at

    @event("PaidLate")
    def _paid_late(self, at: datetime, payment: ChainPayment) -> None:
        self.status = Status.CANCELLED
        self.cancel_reason = "expired"
        self.payment = payment
        self.updated = at

    @event("Blocked")
    def _block(self, at: datetime, payment: ChainPayment) -> None:
        self.status = Status.BLOCKED
        self.payment = payment
        self.updated = at

    def confirm_payout(
        self, payouts: bool, at: datetime, reference: str | None, bank_account_id: str | None
    ) -> None:
        """The operator starts paying out a confirmed sell: ToPayout -> PayoutConfirming."""
        self._check_payout(payouts, (Status.TO_PAYOUT,), "start the payout of")
        self._payout_confirming(at, reference, bank_account_id)

    @event("PayoutConfirming")
    def _payout_confirming(self, at: datetime, reference: str | None, bank_account_id: str | None) -> None:
        self.status = Status.PAYOUT_CONFIRMING
        self._note_payout(reference, bank_account_id)
        self.updated = at

    def pay_out(
        self, payouts: bool, at: datetime, reference: str | None, bank_account_id: str | None
    ) -> None:
        """The fiat has been paid: ToPayout or PayoutConfirming -> COMPLETED."""
        self._check_payout(payouts, (Status.TO_PAYOUT, Status.PAYOUT_CONFIRMING), "pay out")
        self._paid_out(at, reference, bank_account_id)

    @event("PaidOut")
    def _paid_out(self, at: datetime, reference: str | None, bank_account_id: str | None) -> None:
        self.status = Status.COMPLETED
        self._note_payout(reference, bank_account_id)
        self.updated = at

    def _note_payout(self, reference: str | None, bank_account_id: str | None) -> None:
        self.payout_reference = reference or self.payout_reference
        self.customer_bank_account_id = bank_account_id or self.customer_bank_account_id

    def _check_payout(self, payouts: bool, sources: tuple[Status, ...], action: str) -> None:
        self._require(TransactionType.SELL, "a payout")
        if not payouts:
            raise PayoutsFeatureDisabled(
                f"the partner {self.order.partner} does not have the Payouts feature; confirmed "
                "sells complete without a payout step"
            )
        if self.status not in sources:
            raise self._refused(action, sources)

    # --- both ----------------------------------------------------------------------------------------

    @event("Completed")
    def _complete(self, at: datetime, payment: ChainPayment) -> None:
        self.status = Status.COMPLETED
        self.payment = payment
        self.updated = at

    def expire(self, at: datetime) -> None:
        """A staged buy or an unpaid sell past its validUntil is cancelled."""
        if not self.is_overdue(at):
            raise self._refused("expire", (Status.STAGED, Status.INITIATED))
        self._cancel(at, "expired")

    def cancel(self, at: datetime, reason: str) -> None:
        """A staged buy whose fiat payment failed or was cancelled."""
        if self.status != Status.STAGED:
            raise self._refused("cancel", (Status.STAGED,))
        self._cancel(at, reason)

    @event("Cancelled")
    def _cancel(self, at: datetime, reason: str) -> None:
        self.status = Status.CANCELLED
        self.cancel_reason = reason
        self.updated = at

    def _is_news(self, payment: ChainPayment) -> bool:
        """A report of the recorded transfer with no more confirmations changes nothing."""
        if self.payment is None:
            return True
        if payment.tx_id != self.payment.tx_id:
            raise ChainReportConflict(
                f"transaction {self.code} already has the chain transfer {self.payment.tx_id}; "
                f"{payment.tx_id} cannot be recorded for it too"
            )
        if payment.amount is not None and payment.amount != self.payment.amount:
            raise ChainReportConflict(
                f"transfer {payment.tx_id} was reported with amount {self.payment.amount} before"
            )
        return payment.confirmations > self.payment.confirmations and self.status not in (
            FINAL_STATUSES | {Status.TO_PAYOUT, Status.PAYOUT_CONFIRMING}
        )

    def _require(self, kind: TransactionType, what: str) -> None:
        if self.type != kind:
            raise InvalidStateTransition(f"transaction {self.code} is a {self.type}; {what} needs a {kind}")

    def _refused(self, action: str, sources: tuple[Status, ...] | None = None) -> InvalidStateTransition:
        allowed = f" (allowed from {', '.join(sources)})" if sources else ""
        return InvalidStateTransition(
            f"cannot {action} transaction {self.code} in status {self.status}{allowed}"
        )


def _require_type(order: Order, kind: TransactionType) -> None:
    if order.type != kind:
        raise ValueError(f"order {order.code} is a {order.type}, not a {kind}")
