"""State machines over `Transaction`: the rules are the commands, the invariants are the rules of the ledger.

Each command is checked against a small model of the contract (which error, or which status; a sell's payment
first seen after validUntil leaves it CANCELLED as a late payment; the operator's resolution moves a BLOCKED
sell or a late payment on, and a sell's sendout is its refund's). Whatever the
model says, a refused command must leave the aggregate exactly as it was, and an accepted one must move the
status along an allowed edge. After every step the aggregate is saved to an in-memory event store, and the
copy reloaded from it must equal the one in memory.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

from eventsourcing.application import Application
from eventsourcing.persistence import JSONTranscoder
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from application.store.transcodings import register_value_objects
from domain.errors import (
    ChainReportConflict,
    DomainError,
    InvalidStateTransition,
    PayoutsFeatureDisabled,
    TransactionExpired,
    TransactionNotStaged,
)
from domain.transaction import ChainPayment, Order, Transaction, balance_mutation
from domain.transaction_states import ALLOWED_TRANSITIONS, FINAL_STATUSES, Status, TransactionType
from tests.strategies import orders

START = datetime(2026, 11, 21, 10, 0, tzinfo=UTC)
NOTHING = "nothing recorded"  # the command is accepted and changes nothing
OFFSETS = st.sampled_from((-3600, -1, 0, 1, 3600)) | st.integers(-7200, 7200)
TX_IDS = st.sampled_from(("tx-1", "tx-1", "tx-1", "tx-2"))
CONFIRMATIONS = st.integers(0, 8)
REQUIRED = st.integers(1, 6)
REFERENCES = st.none() | st.sampled_from(("ref-1", "ref-2"))
BANK_ACCOUNTS = st.none() | st.sampled_from(("bank-1", "bank-2"))
MOMENTS = st.integers(0, 10_000).map(lambda seconds: START + timedelta(seconds=seconds))
PAYOUTS_FEATURE = st.sampled_from((True, True, True, False))
REASONS = st.sampled_from(("payment failed", "cancelled by customer"))
PAID_AMOUNTS = st.sampled_from(
    ("expected",) * 4 + ("expected, more zeros",) * 2 + ("one more", "one less", "half")
)
DEPOSIT_REPORTS = st.fixed_dictionaries(
    {
        "tx_id": TX_IDS,
        "confirmations": CONFIRMATIONS,
        "required": REQUIRED,
        "payouts": PAYOUTS_FEATURE,
        "amount": PAID_AMOUNTS,
        "at": MOMENTS,
    }
)
PAYOUTS = st.fixed_dictionaries(
    {"payouts": PAYOUTS_FEATURE, "at": MOMENTS, "reference": REFERENCES, "bank": BANK_ACCOUNTS}
)
PAYMENT_STEP = frozenset({Status.TO_PAYOUT, Status.PAYOUT_CONFIRMING, Status.REFUNDING})
# final for the chain's reports, but the operator may still resolve them (a BLOCKED sell, a late payment)
RESOLVABLE = frozenset({Status.BLOCKED, Status.CANCELLED})
NETWORK_FEES = st.sampled_from((Decimal(0), Decimal("0.00002"), Decimal("0.001"), Decimal(1000)))
RESOLUTIONS = st.fixed_dictionaries(
    {"payouts": PAYOUTS_FEATURE, "at": MOMENTS, "network_fee": NETWORK_FEES, "accept": st.booleans()}
)

Outcome = type[DomainError] | Status | str


class Store(Application):
    """An in-memory event store that stores the domain's value objects as the ledger does."""

    def register_transcodings(self, transcoder: JSONTranscoder) -> None:
        super().register_transcodings(transcoder)
        register_value_objects(transcoder)


def statuses_of(kind: TransactionType) -> set[Status]:
    return {status for edge in ALLOWED_TRANSITIONS[kind] for status in edge}


class TransactionMachine(RuleBasedStateMachine):
    """The commands of both types; a buy machine and a sell machine differ in how they start."""

    kind: TransactionType

    def __init__(self) -> None:
        super().__init__()
        self.store = Store(env={"PERSISTENCE_MODULE": "eventsourcing.popo"})
        self.tx: Transaction | None = None
        self.final: Status | None = None

    def start(self, transaction: Transaction) -> None:
        self.tx = transaction
        self.store.save(transaction)

    @property
    def order(self) -> Order:
        assert self.tx is not None
        return self.tx.order

    # --- the check every command goes through -------------------------------------------------------

    def attempt(self, command: Callable[[], Any], expected: Outcome, at: datetime) -> None:
        tx = self.tx
        assert tx is not None
        before = copy.deepcopy(tx)
        old_status, old_version = tx.status, tx.version
        try:
            command()
        except DomainError as error:
            assert tx.version == old_version
            assert tx.pending_events == []
            assert tx.__dict__ == before.__dict__
            assert expected is type(error), f"refused with {error!r}, expected {expected}"
            return
        new_status = tx.status
        assert new_status == old_status or (old_status, new_status) in ALLOWED_TRANSITIONS[self.kind]
        if expected == NOTHING:
            assert tx.pending_events == []
            assert tx.__dict__ == before.__dict__
        else:
            assert expected == new_status, f"moved to {new_status}, expected {expected}"
            assert tx.version == old_version + 1
            assert len(tx.pending_events) == 1
            assert tx.updated == at
        self.store.save(tx)

    # --- the model of the contract ------------------------------------------------------------------

    def chain_outcome(
        self, payment: ChainPayment, kind: TransactionType, sources: tuple[Status, ...]
    ) -> Outcome | None:
        """The outcome every chain report shares; None when the report is news to act on."""
        tx = self.tx
        assert tx is not None
        if tx.type != kind:
            return InvalidStateTransition
        recorded = tx.payment
        if recorded is not None:
            if payment.tx_id != recorded.tx_id:
                return ChainReportConflict
            if payment.amount is not None and payment.amount != recorded.amount:
                return ChainReportConflict
            if payment.confirmations <= recorded.confirmations:
                return NOTHING
            if tx.status in FINAL_STATUSES | PAYMENT_STEP:
                return NOTHING
        if tx.status not in sources:
            return InvalidStateTransition
        return None

    def payout_outcome(self, payouts: bool, sources: tuple[Status, ...], target: Status) -> Outcome:
        tx = self.tx
        assert tx is not None
        if tx.type != TransactionType.SELL:
            return InvalidStateTransition
        if not payouts:
            return PayoutsFeatureDisabled
        return target if tx.status in sources else InvalidStateTransition

    # --- the commands, each checked against the model ------------------------------------------------

    def do_commit(self, offset: int) -> None:
        tx = self.tx
        assert tx is not None
        at = tx.valid_until + timedelta(seconds=offset)
        if tx.status != Status.STAGED:
            expected: Outcome = TransactionNotStaged
        elif at > tx.valid_until:
            expected = TransactionExpired
        else:
            expected = Status.SENDING
        self.attempt(lambda: tx.commit(at), expected, at)

    def do_expire(self, offset: int) -> None:
        tx = self.tx
        assert tx is not None
        at = tx.valid_until + timedelta(seconds=offset)
        unpaid = tx.status in (Status.STAGED, Status.INITIATED)
        expected = Status.CANCELLED if unpaid and at > tx.valid_until else InvalidStateTransition
        self.attempt(lambda: tx.expire(at), expected, at)
        if expected == Status.CANCELLED:
            assert tx.cancel_reason == "expired"

    def do_cancel(self, at: datetime, reason: str) -> None:
        tx = self.tx
        assert tx is not None
        expected = Status.CANCELLED if tx.status == Status.STAGED else InvalidStateTransition
        self.attempt(lambda: tx.cancel(at, reason), expected, at)
        if expected == Status.CANCELLED:
            assert tx.cancel_reason == reason

    def do_report_sendout(self, tx_id: str, confirmations: int, required: int, at: datetime) -> None:
        tx = self.tx
        assert tx is not None
        payment = ChainPayment(tx_id, confirmations)
        expected = self.chain_outcome(payment, TransactionType.BUY, (Status.SENDING,))
        if expected is None:
            expected = Status.COMPLETED if confirmations >= required else Status.SENDING
        self.attempt(lambda: tx.report_sendout(payment, required, at), expected, at)
        if expected in (Status.COMPLETED, Status.SENDING):
            assert tx.payment == payment

    def do_report_deposit(
        self,
        tx_id: str,
        confirmations: int,
        required: int,
        payouts: bool,
        amount: str,
        at: datetime,
    ) -> None:
        tx = self.tx
        assert tx is not None
        expected_amount = self.order.quote.crypto_amount
        quantum = Decimal(1).scaleb(expected_amount.as_tuple().exponent)  # type: ignore[arg-type]
        paid = {
            "expected": expected_amount,
            "expected, more zeros": Decimal(f"{expected_amount}000"),
            "one more": expected_amount + quantum,
            "one less": expected_amount - quantum,
            "half": expected_amount / 2,
        }[amount]
        payment = ChainPayment(tx_id, confirmations, paid)
        sources = (Status.INITIATED, Status.CONFIRMING, Status.CANCELLED)
        expected = self.chain_outcome(payment, TransactionType.SELL, sources)
        late = tx.status == Status.CANCELLED or (tx.status == Status.INITIATED and at > tx.valid_until)
        if expected is None:
            if late:  # first seen after validUntil: the sell stays (or becomes) CANCELLED, to refund
                expected = Status.CANCELLED
            elif paid != expected_amount:
                expected = Status.BLOCKED
            elif confirmations < required:
                expected = Status.CONFIRMING
            else:
                expected = Status.TO_PAYOUT if payouts else Status.COMPLETED
        self.attempt(lambda: tx.report_deposit(payment, required, payouts, at), expected, at)
        if isinstance(expected, Status):
            assert tx.payment == payment
        if expected == Status.CANCELLED:
            assert tx.cancel_reason == "expired"

    def do_confirm_payout(self, payouts: bool, at: datetime, reference: str | None, bank: str | None) -> None:
        tx = self.tx
        assert tx is not None
        old_reference = tx.payout_reference
        expected = self.payout_outcome(payouts, (Status.TO_PAYOUT,), Status.PAYOUT_CONFIRMING)
        self.attempt(lambda: tx.confirm_payout(payouts, at, reference, bank), expected, at)
        if expected == Status.PAYOUT_CONFIRMING:
            assert tx.payout_reference == (reference or old_reference)

    def do_pay_out(self, payouts: bool, at: datetime, reference: str | None, bank: str | None) -> None:
        tx = self.tx
        assert tx is not None
        old_bank = tx.customer_bank_account_id
        sources = (Status.TO_PAYOUT, Status.PAYOUT_CONFIRMING)
        expected = self.payout_outcome(payouts, sources, Status.COMPLETED)
        self.attempt(lambda: tx.pay_out(payouts, at, reference, bank), expected, at)
        if expected == Status.COMPLETED:
            assert tx.customer_bank_account_id == (bank or old_bank)

    def do_resolve(self, accept: bool, payouts: bool, network_fee: Decimal, at: datetime) -> None:
        """The operator's resolution: the amount received accepted (a BLOCKED sell), or refunded less the
        network fee (a BLOCKED sell, a late payment); REFUNDED at once when the fee leaves nothing."""
        tx = self.tx
        assert tx is not None
        paid_late = tx.status == Status.CANCELLED and tx.payment is not None
        resolvable = tx.status == Status.BLOCKED or (paid_late and not accept)
        expected: Outcome = InvalidStateTransition
        if tx.type == TransactionType.SELL and resolvable and tx.payment is not None:
            received = tx.payment.amount
            assert received is not None
            if accept:
                expected = Status.TO_PAYOUT if payouts else Status.COMPLETED
            else:
                expected = Status.REFUNDING if received > network_fee else Status.REFUNDED
        priced_with: list[Decimal] = []

        def priced_again(amount: Decimal) -> Order:
            priced_with.append(amount)
            return tx.order

        if accept:
            self.attempt(lambda: tx.accept_received(priced_again, payouts, "agreed", at), expected, at)
        else:
            self.attempt(lambda: tx.refund("refund-address", network_fee, "agreed", at), expected, at)
        if expected == Status.REFUNDING:
            assert tx.refund_amount is not None and tx.refund_amount + network_fee == tx.payment.amount
        if expected in (Status.TO_PAYOUT, Status.COMPLETED) and tx.payment is not None:
            assert priced_with == [tx.payment.amount]

    def do_report_refund(self, tx_id: str, confirmations: int, required: int, at: datetime) -> None:
        """A sell's sendout is its refund's: REFUNDED once confirmed; before, recorded while Refunding."""
        tx = self.tx
        assert tx is not None
        payment = ChainPayment(tx_id, confirmations)
        recorded = tx.refund_payment
        expected: Outcome
        if recorded is not None and tx_id != recorded.tx_id:
            expected = ChainReportConflict
        elif recorded is not None and (
            confirmations <= recorded.confirmations or tx.status == Status.REFUNDED
        ):
            expected = NOTHING
        elif tx.status != Status.REFUNDING:
            expected = InvalidStateTransition
        else:
            expected = Status.REFUNDED if confirmations >= required else Status.REFUNDING
        self.attempt(lambda: tx.report_sendout(payment, required, at), expected, at)
        if isinstance(expected, Status):
            assert tx.refund_payment == payment

    # --- invariants: the rules ----------------------------------------------------------------------

    @invariant()
    def status_is_valid_for_the_type(self) -> None:
        if self.tx is not None:
            assert self.tx.status in statuses_of(self.kind)
            assert self.tx.type == self.kind

    @invariant()
    def final_statuses_never_change(self) -> None:
        if self.tx is None:
            return
        if self.final is not None:
            assert self.tx.status == self.final
        elif self.tx.status in FINAL_STATUSES - RESOLVABLE:
            self.final = self.tx.status
        assert self.tx.is_open == (self.tx.status not in FINAL_STATUSES)

    @invariant()
    def amounts_and_fees_add_up(self) -> None:
        if self.tx is None:
            return
        quote = self.tx.order.quote
        fees = quote.fees.partner_fiat + quote.fees.bank_fiat + quote.fees.network_fiat
        crypto, fiat = balance_mutation(self.tx.order)
        if self.kind == TransactionType.BUY:
            assert quote.fiat_value == quote.crypto_value + fees
            assert (crypto, fiat) == (0, 0)
        else:
            assert quote.crypto_value == quote.fiat_value + fees
            assert (crypto, fiat) == (-quote.crypto_amount, quote.fiat_value)
        assert quote.crypto_amount > 0

    @invariant()
    def the_aggregate_reloaded_from_the_store_equals_the_one_in_memory(self) -> None:
        if self.tx is None:
            return
        assert self.tx.pending_events == []
        reloaded = self.store.repository.get(self.tx.id)
        assert reloaded.__dict__ == self.tx.__dict__


class BuyMachine(TransactionMachine):
    kind = TransactionType.BUY

    @initialize(order=orders(TransactionType.BUY), minutes=st.integers(1, 60), stage=st.booleans())
    def stage(self, order: Order, minutes: int, stage: bool) -> None:
        """Staged, or (created without `stage`) Staged and Committed at once and Sending from the start."""
        valid_until = START + timedelta(minutes=minutes)
        if stage:
            tx = Transaction.stage_buy(order, START, valid_until)
            assert tx.status == Status.STAGED
        else:
            tx = Transaction.send_buy(order, START, valid_until)
            assert tx.status == Status.SENDING and len(tx.pending_events) == 2
            assert tx.pending_events[0].mutate(None).status == Status.SENDING
        self.start(tx)

    @rule(offset=OFFSETS)
    def commit(self, offset: int) -> None:
        self.do_commit(offset)

    @rule(offset=OFFSETS)
    def expire(self, offset: int) -> None:
        self.do_expire(offset)

    @rule(at=MOMENTS, reason=REASONS)
    def cancel(self, at: datetime, reason: str) -> None:
        self.do_cancel(at, reason)

    @rule(tx_id=TX_IDS, confirmations=CONFIRMATIONS, required=REQUIRED, at=MOMENTS)
    def report_sendout(self, tx_id: str, confirmations: int, required: int, at: datetime) -> None:
        self.do_report_sendout(tx_id, confirmations, required, at)

    @rule(data=st.data())
    def a_sell_command(self, data: st.DataObject) -> None:
        """A command of sells sent to a buy: always refused, whatever the status."""
        command = data.draw(st.sampled_from(("report_deposit", "confirm_payout", "pay_out", "resolve")))
        if command == "report_deposit":
            self.do_report_deposit(**data.draw(DEPOSIT_REPORTS))
        elif command == "resolve":
            self.do_resolve(**data.draw(RESOLUTIONS))
        else:
            getattr(self, f"do_{command}")(**data.draw(PAYOUTS))


class SellMachine(TransactionMachine):
    kind = TransactionType.SELL

    @initialize(order=orders(TransactionType.SELL), minutes=st.integers(1, 60))
    def initiate(self, order: Order, minutes: int) -> None:
        tx = Transaction.initiate_sell(order, START, START + timedelta(minutes=minutes))
        assert tx.status == Status.INITIATED
        self.start(tx)

    @rule(report=DEPOSIT_REPORTS)
    def report_deposit(self, report: dict[str, Any]) -> None:
        self.do_report_deposit(**report)

    @rule(payout=PAYOUTS)
    def confirm_payout(self, payout: dict[str, Any]) -> None:
        self.do_confirm_payout(**payout)

    @rule(payout=PAYOUTS)
    def pay_out(self, payout: dict[str, Any]) -> None:
        self.do_pay_out(**payout)

    @rule(offset=OFFSETS)
    def expire(self, offset: int) -> None:
        self.do_expire(offset)

    @rule(resolution=RESOLUTIONS)
    def resolve(self, resolution: dict[str, Any]) -> None:
        self.do_resolve(**resolution)

    @rule(tx_id=TX_IDS, confirmations=CONFIRMATIONS, required=REQUIRED, at=MOMENTS)
    def report_refund(self, tx_id: str, confirmations: int, required: int, at: datetime) -> None:
        self.do_report_refund(tx_id, confirmations, required, at)

    @rule(data=st.data())
    def a_buy_command(self, data: st.DataObject) -> None:
        """A command of buys sent to a sell: always refused, whatever the status."""
        command = data.draw(st.sampled_from(("commit", "cancel")))
        if command == "commit":
            self.do_commit(data.draw(OFFSETS))
        else:
            self.do_cancel(data.draw(MOMENTS), data.draw(REASONS))


MACHINE_SETTINGS = settings(max_examples=80, stateful_step_count=25, deadline=None)
BuyMachine.TestCase.settings = MACHINE_SETTINGS
SellMachine.TestCase.settings = MACHINE_SETTINGS
TestBuyTransactionMovesOnlyAlongAllowedEdges = BuyMachine.TestCase
TestSellTransactionMovesOnlyAlongAllowedEdges = SellMachine.TestCase
