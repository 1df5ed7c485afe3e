"""Chain reports the ledger could not apply as reported, kept so that a reconciliation can list them.

The blockchain watcher reports deposits to sells' addresses and sendouts of buys. A report that names no
transaction of the partner (an address or a code it does not know), one a transaction is not waiting for
(a sendout of a cancelled buy), one of a second transfer for a transaction that has one, one of another
amount for the recorded transfer, or one with fewer confirmations than recorded (a reorganisation, or a
watcher out of order) changes no transaction: it is refused, or ignored, as before. Yet money moved on
chain, and an auditor must see it: such a report is recorded here, as the event of a `DisputedReport` of
its own, named by everything it said, so the same report sent again (a watcher's retry) is recorded once.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from enum import StrEnum
from uuid import UUID

from eventsourcing.domain import Aggregate

from domain.ids import business_id
from domain.transaction import ChainPayment


class Dispute(StrEnum):
    """Why a chain report changed no transaction."""

    ADDRESS_UNKNOWN = "address_unknown"  # a deposit to an address of no sell of the partner
    TRANSACTION_UNKNOWN = "transaction_unknown"  # a sendout of a code of no transaction of the partner
    NOT_EXPECTED = "not_expected"  # its transaction was not waiting for it (a sendout of a cancelled buy)
    ANOTHER_TRANSFER = "another_transfer"  # a second transfer for a transaction that has one
    ANOTHER_AMOUNT = "another_amount"  # the recorded transfer, with another amount
    FEWER_CONFIRMATIONS = "fewer_confirmations"  # the recorded transfer, with fewer confirmations


@dataclass(frozen=True)
class ReportedTransfer:
    """What the watcher said: a deposit (crypto, address) or a sendout (transaction code), and the
    transfer."""

    report: str  # "deposit" or "sendout"
    tx_id: str
    confirmations: int
    amount: Decimal | None = None
    crypto: str | None = None
    address: str | None = None
    transaction_code: str | None = None


def dispute_of(recorded: ChainPayment | None, reported: ChainPayment) -> Dispute | None:
    """How a report of `reported` disagrees with the transfer its transaction recorded (None: it does not)."""
    if recorded is None:
        return None
    if reported.tx_id != recorded.tx_id:
        return Dispute.ANOTHER_TRANSFER
    if reported.amount is not None and reported.amount != recorded.amount:
        return Dispute.ANOTHER_AMOUNT
    if reported.confirmations < recorded.confirmations:
        return Dispute.FEWER_CONFIRMATIONS
    return None


class DisputedReport(Aggregate):
    """One chain report of a partner that changed no transaction, and why."""

    @staticmethod
    def create_id(partner: str, reason: str, transfer: ReportedTransfer, **_: object) -> UUID:
        said = (transfer.report, transfer.tx_id, str(transfer.confirmations), str(transfer.amount))
        where = (transfer.crypto or "", transfer.address or "", transfer.transaction_code or "")
        return business_id("disputed-chain-report", partner, reason, *said, *where)

    @classmethod
    def record(
        cls, partner: str, reason: Dispute, transfer: ReportedTransfer, at: datetime
    ) -> DisputedReport:
        """The report as the watcher sent it, with why it changed no transaction (its fields flat in the
        event, so the event needs no value object of its own in the store's codecs)."""
        return cls._create(
            cls.Recorded,
            id=cls.create_id(partner, reason.value, transfer),
            partner=partner,
            reason=reason.value,
            report=transfer.report,
            tx_id=transfer.tx_id,
            confirmations=transfer.confirmations,
            amount=transfer.amount,
            crypto=transfer.crypto,
            address=transfer.address,
            transaction_code=transfer.transaction_code,
            at=at,
        )

    class Recorded(Aggregate.Created):
        partner: str
        reason: str
        report: str
        tx_id: str
        confirmations: int
        amount: Decimal | None
        crypto: str | None
        address: str | None
        transaction_code: str | None
        at: datetime

    def __init__(
        self,
        partner: str,
        reason: str,
        report: str,
        tx_id: str,
        confirmations: int,
        amount: Decimal | None,
        crypto: str | None,
        address: str | None,
        transaction_code: str | None,
        at: datetime,
    ) -> None:
        self.partner = partner
        self.reason = reason
        self.transfer = ReportedTransfer(
            report, tx_id, confirmations, amount, crypto, address, transaction_code
        )
        self.at = at
