"""Use cases after creation: chain reports, payouts, and the lapse of overdue transactions."""

from __future__ import annotations

from datetime import datetime

from eventsourcing.persistence import Notification

from application.commands import DepositReport, SendoutReport
from application.trading import Trading
from domain.deposits import DepositAddress
from domain.errors import DepositAddressUnknown, InvalidStateTransition
from domain.pricing import check_amount
from domain.transaction import ChainPayment, Transaction

OPENING_TOPICS = ("Transaction.Staged", "Transaction.Initiated")


class Settlement(Trading):
    def report_deposit(self, partner: str, report: DepositReport) -> Transaction:
        """The customer's payment to a sell's deposit address, with its confirmations so far."""
        self.desk.crypto(report.crypto)
        check_amount(self.settings.crypto_asset(report.crypto), report.crypto_amount, "cryptoAmount")
        index = self.find(DepositAddress.create_id(report.crypto, report.address))
        if index is None or index.partner != partner:
            raise DepositAddressUnknown(
                f"{report.address} is not the deposit address of any sell in {report.crypto}"
            )
        payment = ChainPayment(report.tx_id, report.confirmations, report.crypto_amount)
        required = self.settings.cryptos[report.crypto].required_confirmations
        payouts = self.settings.partners[partner].has_payouts

        return self.change_transaction(
            partner,
            index.transaction_code,
            lambda tx, at: tx.report_deposit(payment, required, payouts, at),
        )

    def report_sendout(self, partner: str, report: SendoutReport) -> Transaction:
        """Our sendout of a buy's crypto, with its confirmations so far."""
        payment = ChainPayment(report.tx_id, report.confirmations)

        def record(transaction: Transaction, at: datetime) -> None:
            required = self.settings.cryptos[transaction.order.crypto].required_confirmations
            transaction.report_sendout(payment, required, at)

        return self.change_transaction(partner, report.transaction_code, record)

    def confirm_payout(
        self, partner: str, code: str, reference: str | None = None, bank_account: str | None = None
    ) -> Transaction:
        payouts = self.settings.partners[partner].has_payouts
        return self.change_transaction(
            partner, code, lambda tx, at: tx.confirm_payout(payouts, at, reference, bank_account)
        )

    def pay_out(
        self, partner: str, code: str, reference: str | None = None, bank_account: str | None = None
    ) -> Transaction:
        payouts = self.settings.partners[partner].has_payouts
        return self.change_transaction(
            partner, code, lambda tx, at: tx.pay_out(payouts, at, reference, bank_account)
        )

    def expire(self, partner: str, code: str) -> Transaction:
        """Cancels one staged buy or unpaid sell past its validUntil, giving back its limits."""
        return self.change_transaction(partner, code, Transaction.expire, release_limits=True)

    def expire_overdue(self, batch: int = 500) -> list[str]:
        """Cancels every staged buy and unpaid sell past its validUntil; returns their codes.

        Reads the application's own event log for the transactions opened since the last sweep and
        keeps the open ones in memory, so a sweep costs what was recorded since the last one.
        """
        with self._sweeping:
            self._scan_openings(batch)
            now = self.clock.now()
            expired = []
            for key, (partner, code, valid_until) in list(self._deadlines.items()):
                if valid_until >= now:
                    continue
                try:
                    self.expire(partner, code)
                    expired.append(code)
                except InvalidStateTransition:
                    pass  # committed, paid or already cancelled meanwhile
                del self._deadlines[key]
            return expired

    def _scan_openings(self, batch: int) -> None:
        while True:
            notifications = self.recorder.select_notifications(
                start=self._scanned + 1, limit=batch, topics=self._opening_topics()
            )
            for notification in notifications:
                self._note_deadline(notification)
                self._scanned = notification.id
            if len(notifications) < batch:
                return

    def _opening_topics(self) -> list[str]:
        return [f"{Transaction.__module__}:{name}" for name in OPENING_TOPICS]

    def _note_deadline(self, notification: Notification) -> None:
        opened = self.mapper.to_domain_event(notification)
        order = opened.order
        self._deadlines[order.code + order.partner] = (
            order.partner,
            order.code,
            opened.valid_until,
        )
