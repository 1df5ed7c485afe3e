"""The payout queue: the partner's sells that wait for its operator, by what they wait for (a payout, a
blocked payment or a late one to resolve, a refund to send), newest first, each with the API call that acts
on it. The console changes nothing: it shows the call, which the operator makes with its own client's token
(docs/api.md); each section is a filter of `GET /transactions/custodian`, shown beside it."""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from application.settings import Settings
from domain.transaction import Status
from interface.shared import transaction_presenters as presenters
from interface.shared import transaction_shapes as r
from interface.shared.reserve_reading import shown_amount
from interface.shared.transaction_reading import Reader
from projections.queries import TransactionFilter

SECTION_SIZE = 50  # the newest of each section; the section's filter lists them all
TRANSACTIONS = "/transactions/custodian"
# the sell waiting for its refund's sendout: a status of the resolution (contract-notes.md, "Resolving blocked
# sells and late payments"), named as `domain.transaction.Status` names it
REFUNDING = "Refunding"


@dataclass(frozen=True)
class Action:
    """An API call of the operator's that moves a queued sell on: method, path and body, and what it does."""

    method: str
    path: str
    body: str | None
    does: str


@dataclass(frozen=True)
class Entry:
    """A queued sell, the crypto its customer sent (at the coin's places; None when none is recorded), what a
    refund decided sends back and where (None without one), and the calls that act on it."""

    transaction: r.Transaction
    received: Decimal | None
    actions: list[Action]
    refund: Decimal | None = None
    refund_address: str | None = None


@dataclass(frozen=True)
class Section:
    """One part of the queue: the newest of its sells (at most SECTION_SIZE), how many there are, and the
    queries of `GET /transactions/custodian` that list them all."""

    key: str
    heading: str
    waits_for: str
    entries: list[Entry]
    total: int
    queries: list[str]

    @property
    def more(self) -> int:
        return self.total - len(self.entries)


# key, heading, what its sells wait for, their filters (with the query of the list that gives each)
SECTIONS: tuple[tuple[str, str, str, tuple[tuple[TransactionFilter, str], ...]], ...] = (
    (
        "to-pay-out",
        "To pay out",
        "Confirmed sells whose fiat payout the operator makes: start it (PayoutConfirming) while the bank "
        "transfer is under way, record it (COMPLETED) when it is done.",
        (
            (TransactionFilter(status=Status.TO_PAYOUT), f"status={Status.TO_PAYOUT}"),
            (TransactionFilter(status=Status.PAYOUT_CONFIRMING), f"status={Status.PAYOUT_CONFIRMING}"),
        ),
    ),
    (
        "blocked",
        "Blocked",
        "Sells paid with another amount than quoted: accept what was received (priced again at the quoted "
        "price) or refund it.",
        ((TransactionFilter(status=Status.BLOCKED), f"status={Status.BLOCKED}"),),
    ),
    (
        "paid-late",
        "Paid late",
        "Sells that expired before their payment was seen (CANCELLED): the payment is owed back, to refund.",
        ((TransactionFilter(paid_late=True), "paidLate=true"),),
    ),
    (
        "refunding",
        "Refunding",
        "Refunds decided, waiting for their sendout: report it to the ledger when the watcher sees it.",
        ((TransactionFilter(status=REFUNDING), f"status={REFUNDING}"),),
    ),
)


def payout_queue(reader: Reader, settings: Settings, partner: str) -> list[Section]:
    """Every section of the partner's queue, from the read models after the partner's last write."""
    sections = []
    for key, heading, waits_for, filters in SECTIONS:
        total, rows = 0, []
        for where, _ in filters:
            found, page = reader.transactions(partner, where, 1, SECTION_SIZE)
            total, rows = total + found, rows + page
        rows.sort(key=lambda row: (row["created"], row["transaction_code"]), reverse=True)
        entries = [entry_of(settings, row) for row in rows[:SECTION_SIZE]]
        queries = [f"GET {TRANSACTIONS}?{query}" for _, query in filters]
        sections.append(Section(key, heading, waits_for, entries, total, queries))
    return sections


def entry_of(settings: Settings, row: dict[str, Any]) -> Entry:
    """A row of `read.transactions` in the queue (a refund's columns read where the row has them)."""

    def crypto(amount: Decimal | None) -> Decimal | None:
        return None if amount is None else shown_amount(settings, row["crypto_code"], amount)

    return Entry(
        transaction=presenters.transaction_row(settings, row),
        received=crypto(row["received_crypto_amount"]),
        actions=actions_of(row["transaction_code"], row["status"]),
        refund=crypto(row.get("refund_crypto_amount")),
        refund_address=row.get("refund_address"),
    )


def actions_of(code: str, status: str) -> list[Action]:
    """The calls that move a sell of `status` on (none for a status the queue does not hold)."""
    path = f"{TRANSACTIONS}/{code}"
    resolution = f"{path}/resolution"
    if status == Status.TO_PAYOUT:
        return [
            Action("PUT", f"{path}/payoutconfirming", '{"paymentReference": "..."}', "start the payout"),
            Action("PUT", f"{path}/payout", "{}", "record the payout as made (without starting it)"),
        ]
    if status == Status.PAYOUT_CONFIRMING:
        return [Action("PUT", f"{path}/payout", "{}", "record the payout as made")]
    refund = Action(
        "POST",
        resolution,
        '{"resolution": "Refund", "reason": "..."}',
        "send the payment back, less the network fee (to the account's address, or give refundAddress)",
    )
    if status == Status.BLOCKED:
        accept = '{"resolution": "AcceptReceived", "reason": "..."}'
        return [Action("POST", resolution, accept, "accept the amount received and go on"), refund]
    if status == Status.CANCELLED:
        return [refund]
    if status == REFUNDING:
        sendout = f'{{"transactionCode": "{code}", "txId": "...", "confirmations": ...}}'
        return [Action("POST", "/chain/sendouts", sendout, "report the refund's sendout seen on chain")]
    return []
