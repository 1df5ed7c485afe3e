"""Use cases after creation: chain reports, payouts, and the lapse of one overdue transaction."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from decimal import Decimal

from application.changes import TransactionChanges
from application.commands import DepositReport, SendoutReport
from application.context import Context
from application.request_checks import problems_of, refuse_all
from application.store.actors import service_actor
from application.store.request_writes import RequestWrites
from domain.chain_reports import Dispute, DisputedReport, ReportedTransfer, dispute_of
from domain.deposits import DepositAddress
from domain.errors import (
    ChainReportConflict,
    DepositAddressUnknown,
    DomainError,
    InvalidStateTransition,
    TransactionNotFound,
)
from domain.money import DIGITS_AFTER_POINT, Asset
from domain.pricing import check_amount
from domain.transaction import ChainPayment, Transaction

EXPIRY_SWEEPER = service_actor("expiry-sweeper")


class Settlement:
    def __init__(self, context: Context, changes: TransactionChanges) -> None:
        self.context = context
        self.store = context.store
        self.changes = changes

    def report_problems(self, crypto: str | None, amount: Decimal | None) -> list[DomainError]:
        """Every problem of a deposit report's own content: its crypto-currency, and its amount (at that
        crypto-currency's places when it is known; else only above zero and below the bound). A field that
        is None was not given, or could not be read."""
        cryptos = self.context.settings.cryptos
        asset = (
            self.context.settings.crypto_asset(crypto) if crypto in cryptos else Asset("", DIGITS_AFTER_POINT)
        )
        return problems_of(
            lambda: crypto is None or self.context.new_desk().crypto(crypto),
            lambda: amount is None or check_amount(asset, amount, "cryptoAmount"),
        )

    def report_deposit(
        self, partner: str, report: DepositReport, *, unit: RequestWrites | None = None
    ) -> Transaction:
        """The customer's payment to a sell's deposit address, with its confirmations so far. One first seen
        after the sell's validUntil cancels it (limits given back) and is recorded as a late payment. A
        payment to an address of no sell of the partner is refused, and kept as a disputed report."""
        settings = self.context.settings
        refuse_all(self.report_problems(report.crypto, report.crypto_amount))
        transfer = ReportedTransfer(
            "deposit", report.tx_id, report.confirmations, report.crypto_amount, report.crypto, report.address
        )
        index = self.store.find(DepositAddress.create_id(report.crypto, report.address))
        if index is None or index.partner != partner:
            self._keep_disputed(partner, Dispute.ADDRESS_UNKNOWN, transfer, unit)
            raise DepositAddressUnknown(
                f"{report.address} is not the deposit address of any sell in {report.crypto}"
            )
        payment = ChainPayment(report.tx_id, report.confirmations, report.crypto_amount)
        required = settings.cryptos[report.crypto].required_confirmations
        payouts = settings.partners[partner].has_payouts
        return self._apply_report(
            partner,
            index.transaction_code,
            transfer,
            payment,
            lambda tx, at: tx.report_deposit(payment, required, payouts, at),
            unit,
            recorded=lambda tx: tx.payment,
        )

    def report_sendout(
        self, partner: str, report: SendoutReport, *, unit: RequestWrites | None = None
    ) -> Transaction:
        """Our sendout of a buy's crypto, or of a sell's refund, with its confirmations so far."""
        payment = ChainPayment(report.tx_id, report.confirmations)
        transfer = ReportedTransfer(
            "sendout", report.tx_id, report.confirmations, transaction_code=report.transaction_code
        )

        def record(transaction: Transaction, at: datetime) -> None:
            required = self.context.settings.cryptos[transaction.order.crypto].required_confirmations
            transaction.report_sendout(payment, required, at)

        return self._apply_report(
            partner, report.transaction_code, transfer, payment, record, unit, recorded=_sendout_of
        )

    def _apply_report(
        self,
        partner: str,
        code: str,
        transfer: ReportedTransfer,
        payment: ChainPayment,
        command: Callable[[Transaction, datetime], None],
        unit: RequestWrites | None,
        *,
        recorded: Callable[[Transaction], ChainPayment | None],
    ) -> Transaction:
        """Applies a chain report to its transaction, answering as the transaction does (a refusal is raised
        again); a report that changed nothing because it disagrees with the recorded transfer, or names no
        transaction the partner waits for, is kept as a disputed report for the reconciliation."""
        disputes: list[Dispute | None] = [None]

        def record(transaction: Transaction, at: datetime) -> None:
            disputes[0] = dispute_of(recorded(transaction), payment)
            command(transaction, at)

        try:
            transaction = self.changes.apply(partner, code, record, unit=unit)
        except TransactionNotFound:
            self._keep_disputed(partner, Dispute.TRANSACTION_UNKNOWN, transfer, unit)
            raise
        except (ChainReportConflict, InvalidStateTransition):
            self._keep_disputed(partner, disputes[0] or Dispute.NOT_EXPECTED, transfer, unit)
            raise
        if disputes[0] is not None:  # fewer confirmations than recorded: the transaction ignored it
            self._keep_disputed(partner, disputes[0], transfer, unit)
        return transaction

    def _keep_disputed(
        self, partner: str, reason: Dispute, transfer: ReportedTransfer, unit: RequestWrites | None
    ) -> None:
        """Records a report that changed no transaction, once: the same report sent again finds it kept. It
        is saved as writes of its own, so the request's Idempotency-Key claim does not ride with a report the
        request then refuses; the request's position is raised to it, so that the partner's next read (a
        reconciliation) waits for it."""
        disputed = DisputedReport.create_id(partner, reason.value, transfer)
        own = RequestWrites(partner, unit.actor if unit is not None else None)
        for attempt in self.store.attempts():
            with attempt:
                if self.store.find(disputed) is None:
                    now = self.context.clock.now()
                    self.store.save(DisputedReport.record(partner, reason, transfer, now), unit=own)
                break
        if unit is not None:
            unit.note_written_beside(own)

    def confirm_payout(
        self,
        partner: str,
        code: str,
        reference: str | None = None,
        bank_account: str | None = None,
        *,
        unit: RequestWrites | None = None,
    ) -> Transaction:
        payouts = self.context.settings.partners[partner].has_payouts
        return self.changes.apply(
            partner, code, lambda tx, at: tx.confirm_payout(payouts, at, reference, bank_account), unit=unit
        )

    def pay_out(
        self,
        partner: str,
        code: str,
        reference: str | None = None,
        bank_account: str | None = None,
        *,
        unit: RequestWrites | None = None,
    ) -> Transaction:
        payouts = self.context.settings.partners[partner].has_payouts
        return self.changes.apply(
            partner, code, lambda tx, at: tx.pay_out(payouts, at, reference, bank_account), unit=unit
        )

    def expire(self, partner: str, code: str) -> Transaction:
        """Cancels one staged buy or unpaid sell past its validUntil, giving back its limits: a decision of
        the service's expiry sweeper, whose events say so (`application.store.actors`)."""
        unit = RequestWrites(partner, EXPIRY_SWEEPER)
        return self.changes.apply(partner, code, Transaction.expire, release_limits=True, unit=unit)


def _sendout_of(transaction: Transaction) -> ChainPayment | None:
    return transaction.recorded_sendout
