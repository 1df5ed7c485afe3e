"""The states of a transaction, and the edges between them, by type.

Buy:  Staged -> Sending (commit) -> COMPLETED (sendout confirmed on chain); Staged -> CANCELLED.
Sell: Initiated -> Confirming -> ToPayout | COMPLETED -> PayoutConfirming -> COMPLETED;
      Initiated -> BLOCKED (payment of another amount) | CANCELLED (no payment before validUntil).
Resolution by the operator (contract-notes.md, "Resolving blocked sells and late payments"):
      BLOCKED -> ToPayout | COMPLETED (the amount received accepted, priced again at the quoted price);
      BLOCKED | CANCELLED with a late payment -> Refunding -> REFUNDED (the refund's sendout confirmed),
      or straight to REFUNDED when the network fee leaves nothing to send.
The commands that move a transaction along them are `domain.transaction.Transaction`'s.
"""

from __future__ import annotations

from enum import StrEnum


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
    REFUNDING = "Refunding"
    REFUNDED = "REFUNDED"


class Resolution(StrEnum):
    """The operator's decision on money no transaction can use."""

    ACCEPT_RECEIVED = "AcceptReceived"
    REFUND = "Refund"


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
        (Status.BLOCKED, Status.TO_PAYOUT),
        (Status.BLOCKED, Status.COMPLETED),
        (Status.BLOCKED, Status.REFUNDING),
        (Status.BLOCKED, Status.REFUNDED),
        (Status.CANCELLED, Status.REFUNDING),
        (Status.CANCELLED, Status.REFUNDED),
        (Status.REFUNDING, Status.REFUNDED),
    },
}
FINAL_STATUSES = frozenset({Status.COMPLETED, Status.CANCELLED, Status.BLOCKED, Status.REFUNDED})
