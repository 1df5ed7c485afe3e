"""The transaction: a broker buy or a broker sell, moving along the state machines of
`domain.transaction_states`.

A quote holds up to and including its validUntil (`quote_is_valid`, the one rule of time for both types): a
buy is committed and a sell's payment is first seen within it, or not at all. A payment first seen after it
is recorded against the expired sell (`PaidLate`, CANCELLED) as a payment to refund, never paid out.
Every command checks first and records after; a refused command raises a named error and records nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
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
from domain.transaction_states import FINAL_STATUSES, Resolution, Status, TransactionType


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
    # what a resolution records (class defaults: a transaction recorded before resolutions existed has none)
    resolution: Resolution | None = None
    resolution_reason: str | None = None
    refund_address: str | None = None
    refund_amount: Decimal | None = None  # what is sent back: the amount received less the network fee
    refund_network_fee: Decimal | None = None
    refund_payment: ChainPayment | None = None  # the refund's sendout, as the watcher reported it

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
        """Our sendout of a buy seen on chain; confirmed with `required` confirmations it completes. A sell's
        sendout is its refund's (`report_refund`)."""
        if self.type == TransactionType.SELL:
            self.report_refund(payment, required, at)
            return
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

    # --- resolution of blocked sells and late payments ---------------------------------------------

    @property
    def was_paid_late(self) -> bool:
        """A CANCELLED sell with a payment recorded: the payment came after validUntil (`PaidLate`)."""
        return self.status == Status.CANCELLED and self.payment is not None

    def accept_received(
        self, priced_again: Callable[[Decimal], Order], payouts: bool, reason: str, at: datetime
    ) -> None:
        """The operator accepts what a BLOCKED sell received: `priced_again` gives the sell's order for that
        amount (at the quoted price, with the same fee rules, the customer's limits taken again, or
        refused); it then goes on as a confirmed payment would."""
        self.check_acceptable()
        assert self.payment is not None and self.payment.amount is not None  # a BLOCKED sell was paid
        self._received_accepted(at, priced_again(self.payment.amount), reason, payouts)

    @event("ReceivedAccepted")
    def _received_accepted(self, at: datetime, order: Order, reason: str, to_payout: bool) -> None:
        self.order = order
        self.status = Status.TO_PAYOUT if to_payout else Status.COMPLETED
        self.resolution = Resolution.ACCEPT_RECEIVED
        self.resolution_reason = reason
        self.updated = at

    def refund(self, address: str, network_fee: Decimal, reason: str, at: datetime) -> None:
        """The operator sends back what a BLOCKED sell or a late payment received, less the coin's network
        fee: Refunding until the refund's sendout is confirmed; REFUNDED at once, the whole amount kept as
        the fee, when the fee leaves nothing to send."""
        self.check_refundable()
        assert self.payment is not None and self.payment.amount is not None  # both hold a payment
        received = self.payment.amount
        amount = received - network_fee
        if amount > 0:
            self._refund_started(at, address, amount, network_fee, reason, self.status)
        else:
            self._refund_not_sent(at, address, received, reason, self.status)

    def check_acceptable(self) -> None:
        """Refuses unless it is a BLOCKED sell, whose amount received the operator may accept."""
        self._require(TransactionType.SELL, "accepting the amount received")
        if self.status != Status.BLOCKED:
            raise self._refused("accept the amount received for", (Status.BLOCKED,))

    def check_refundable(self) -> None:
        """Refuses unless it holds money to refund: a BLOCKED sell, or a CANCELLED sell paid late."""
        self._require(TransactionType.SELL, "a refund")
        if self.status != Status.BLOCKED and not self.was_paid_late:
            raise InvalidStateTransition(
                f"cannot refund transaction {self.code} in status {self.status}: only a BLOCKED sell or a "
                "CANCELLED sell paid late has money to refund"
            )

    @event("RefundStarted")
    def _refund_started(
        self, at: datetime, address: str, amount: Decimal, network_fee: Decimal, reason: str, held: str
    ) -> None:
        """`held`: the status the money was held in (BLOCKED: in suspense; CANCELLED: paid late)."""
        self._resolved_by_refund(at, address, reason)
        self.status = Status.REFUNDING
        self.refund_amount = amount
        self.refund_network_fee = network_fee

    @event("RefundNotSent")
    def _refund_not_sent(self, at: datetime, address: str, kept: Decimal, reason: str, held: str) -> None:
        """Nothing to send: the network fee is at least what was received, which is kept as the fee."""
        self._resolved_by_refund(at, address, reason)
        self.status = Status.REFUNDED
        self.refund_amount = Decimal(0)
        self.refund_network_fee = kept

    def _resolved_by_refund(self, at: datetime, address: str, reason: str) -> None:
        self.resolution = Resolution.REFUND
        self.resolution_reason = reason
        self.refund_address = address
        self.updated = at

    def report_refund(self, payment: ChainPayment, required: int, at: datetime) -> None:
        """The refund's sendout seen on chain; confirmed with `required` confirmations the sell is
        REFUNDED. A report of the recorded sendout with no more confirmations changes nothing."""
        recorded = self.refund_payment
        if recorded is not None and payment.tx_id != recorded.tx_id:
            raise ChainReportConflict(
                f"the refund of transaction {self.code} is the chain transfer {recorded.tx_id}; "
                f"{payment.tx_id} cannot be recorded for it too"
            )
        if recorded is not None and (
            payment.confirmations <= recorded.confirmations or self.status == Status.REFUNDED
        ):
            return
        if self.status != Status.REFUNDING:
            raise self._refused("record a refund's sendout for", (Status.REFUNDING,))
        assert self.refund_amount is not None and self.refund_network_fee is not None
        if payment.confirmations >= required:
            self._refunded(at, payment, self.refund_amount, self.refund_network_fee)
        else:
            self._refund_sendout_seen(at, payment)

    @event("RefundSendoutSeen")
    def _refund_sendout_seen(self, at: datetime, payment: ChainPayment) -> None:
        self.refund_payment = payment
        self.updated = at

    @event("Refunded")
    def _refunded(self, at: datetime, payment: ChainPayment, amount: Decimal, network_fee: Decimal) -> None:
        self.status = Status.REFUNDED
        self.refund_payment = payment
        self.updated = at

    @property
    def recorded_sendout(self) -> ChainPayment | None:
        """The sendout recorded for it: a buy's crypto, a sell's refund."""
        return self.payment if self.type == TransactionType.BUY else self.refund_payment

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
            FINAL_STATUSES | {Status.TO_PAYOUT, Status.PAYOUT_CONFIRMING, Status.REFUNDING}
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
