"""Use cases after creation: chain reports, payouts, and the lapse of overdue transactions."""

from __future__ import annotations

from datetime import datetime

from eventsourcing.persistence import Notification
from eventsourcing.utils import get_topic

from application.commands import DepositReport, SendoutReport
from application.trading import Trading
from domain.deposits import DepositAddress
from domain.errors import DepositAddressUnknown, InvalidStateTransition
from domain.pricing import check_amount
from domain.transaction import ChainPayment, Transaction, quote_is_valid

# The events a transaction opens with (only they leave it expirable), and every event it records.
OPENING_TOPICS = frozenset(get_topic(event) for event in (Transaction.Staged, Transaction.Initiated))
TRANSACTION_TOPICS = sorted(
    get_topic(member)
    for member in vars(Transaction).values()
    if isinstance(member, type) and issubclass(member, Transaction.Event)
)


class Settlement(Trading):
    def report_deposit(self, partner: str, report: DepositReport) -> Transaction:
        """The customer's payment to a sell's deposit address, with its confirmations so far. One first seen
        after the sell's validUntil cancels it (limits given back) and is recorded as a late payment."""
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

        Reads the application's own event log for the transaction events recorded since the last sweep and
        keeps the deadlines of the open ones in memory, so a sweep costs what was recorded since the last
        one. Any event after a transaction's opening moves it out of Staged or Initiated for good, so it
        drops the deadline: a buy committed at once is never decoded here nor visited at its validUntil.
        """
        with self._sweeping:
            self._scan_transaction_events(batch)
            now = self.clock.now()
            expired = []
            for key, (partner, code, valid_until) in list(self._deadlines.items()):
                if quote_is_valid(valid_until, now):
                    continue
                try:
                    self.expire(partner, code)
                    expired.append(code)
                except InvalidStateTransition:
                    pass  # committed, paid or already cancelled meanwhile
                del self._deadlines[key]
            return expired

    def _scan_transaction_events(self, batch: int) -> None:
        while True:
            notifications = self.recorder.select_notifications(
                start=self._scanned + 1, limit=batch, topics=TRANSACTION_TOPICS
            )
            followed = {n.originator_id for n in notifications if n.topic not in OPENING_TOPICS}
            for notification in notifications:
                if notification.topic not in OPENING_TOPICS:
                    self._deadlines.pop(notification.originator_id, None)
                elif notification.originator_id not in followed:
                    self._note_deadline(notification)
                self._scanned = notification.id
            if len(notifications) < batch:
                return

    def _note_deadline(self, notification: Notification) -> None:
        opened = self.mapper.to_domain_event(notification)
        self._deadlines[notification.originator_id] = (
            opened.order.partner,
            opened.order.code,
            opened.valid_until,
        )
