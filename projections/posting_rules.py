"""The posting rules of the ledger: which balanced entries each money-moving event makes (pure, no I/O).

The chart of accounts and when each event posts are described in `projections.ledger_postings` and in
docs/analytics.md ("Ledger postings"). Amounts are Decimal, exact; every rule's entries balance per
currency, and `balanced` refuses a set that does not. The accounts are those of one partner's books: the
projection books each event's entries in its partner's (reserves are each partner's own book).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from decimal import Decimal

from domain.reserves import BANK, HOT_WALLET, AdjustmentKind
from domain.transaction import Order

# fiat
CUSTOMER_RECEIVABLE = "customer_receivable"
FEE_REVENUE = "fee_revenue"
BANK_FEES = "bank_fees"
NETWORK_FEE_RECOVERY = "network_fee_recovery"
PAYOUT_LIABILITY = "payout_liability"
# crypto
CUSTOMER_CRYPTO_LIABILITY = "customer_crypto_liability"
NETWORK_FEES = "network_fees"
NETWORK_FEES_PAYABLE = "network_fees_payable"
UNCONFIRMED_DEPOSITS = "unconfirmed_deposits"
DEPOSITS_PENDING = "deposits_pending"
SUSPENSE = "suspense"
RECEIVED_UNMATCHED = "received_unmatched"  # late payments to expired sells, owed back to their senders
REFUNDS_PAYABLE = "refunds_payable"  # refunds the operator decided, until their sendout is confirmed
REFUND_FEES_KEPT = "refund_fees_kept"  # what was received when the network fee left nothing to refund
# both
TRADING = "trading"
EQUITY = "equity"
RESERVE_PREFIX = "reserve:"


def reserve_account(name: str) -> str:
    return RESERVE_PREFIX + name


HOT_WALLET_ACCOUNT = reserve_account(HOT_WALLET)
BANK_ACCOUNT = reserve_account(BANK)
# what a reserve owes from its total: the crypto of committed buys and their network fees, and late payments
# to refund; sellers' payouts
LOCKED_ACCOUNTS = {
    HOT_WALLET: (CUSTOMER_CRYPTO_LIABILITY, NETWORK_FEES_PAYABLE, RECEIVED_UNMATCHED, REFUNDS_PAYABLE),
    BANK: (PAYOUT_LIABILITY,),
}
UNCONFIRMED_ACCOUNTS = {HOT_WALLET: (UNCONFIRMED_DEPOSITS,)}


@dataclass(frozen=True)
class Entry:
    """One line of a posting: `debit` or `credit` (the other is zero) to `account` in `currency`."""

    account: str
    currency: str
    debit: Decimal = Decimal(0)
    credit: Decimal = Decimal(0)


class UnbalancedPosting(Exception):
    """A rule made entries whose debits and credits differ in some currency: a bug, never written."""


def debit(account: str, currency: str, amount: Decimal) -> Entry:
    return Entry(account, currency, debit=amount)


def credit(account: str, currency: str, amount: Decimal) -> Entry:
    return Entry(account, currency, credit=amount)


def balanced(entries: Iterable[Entry]) -> list[Entry]:
    """The entries without zero lines, checked to balance per currency; raises `UnbalancedPosting`."""
    kept = [e for e in entries if e.debit or e.credit]
    sums: dict[str, Decimal] = defaultdict(Decimal)
    for entry in kept:
        if entry.debit < 0 or entry.credit < 0 or (entry.debit and entry.credit):
            raise UnbalancedPosting(f"an entry is either a positive debit or a positive credit: {entry}")
        sums[entry.currency] += entry.debit - entry.credit
    off = {currency: total for currency, total in sums.items() if total != 0}
    if off:
        raise UnbalancedPosting(f"debits minus credits per currency must be zero, got {off}: {kept}")
    return kept


@dataclass(frozen=True)
class Deal:
    """What the posting rules need of a transaction's order (kept by the view between its events)."""

    partner: str
    code: str
    type: str
    crypto: str
    currency: str
    crypto_amount: Decimal
    network_fee_crypto: Decimal
    fiat_value: Decimal  # a buy's payment, a sell's payout
    crypto_value: Decimal
    partner_fee: Decimal
    bank_fee: Decimal
    network_fee_fiat: Decimal

    def to_json(self) -> dict[str, str]:
        return {name: str(value) for name, value in vars(self).items()}

    @classmethod
    def from_json(cls, data: dict[str, str]) -> Deal:
        return cls(**{name: Decimal(v) if name in DEAL_AMOUNTS else v for name, v in data.items()})

    @classmethod
    def of(cls, order: Order) -> Deal:
        quote = order.quote
        return cls(
            partner=order.partner,
            code=order.code,
            type=order.type,
            crypto=order.crypto,
            currency=order.currency,
            crypto_amount=quote.crypto_amount,
            network_fee_crypto=quote.fees.network_crypto,
            fiat_value=quote.fiat_value,
            crypto_value=quote.crypto_value,
            partner_fee=quote.fees.partner_fiat,
            bank_fee=quote.fees.bank_fiat,
            network_fee_fiat=quote.fees.network_fiat,
        )


DEAL_AMOUNTS = frozenset(
    {"crypto_amount", "network_fee_crypto", "fiat_value", "crypto_value"}
    | {"partner_fee", "bank_fee", "network_fee_fiat"}
)


def _fees(deal: Deal) -> list[Entry]:
    return [
        credit(FEE_REVENUE, deal.currency, deal.partner_fee),
        credit(BANK_FEES, deal.currency, deal.bank_fee),
        credit(NETWORK_FEE_RECOVERY, deal.currency, deal.network_fee_fiat),
    ]


def buy_committed(deal: Deal) -> list[Entry]:
    """The customer owes the fiat value; the service owes the crypto and the network fee to send it."""
    fiat, crypto = deal.currency, deal.crypto
    return balanced(
        [
            debit(CUSTOMER_RECEIVABLE, fiat, deal.fiat_value),
            *_fees(deal),
            credit(TRADING, fiat, deal.crypto_value),
            debit(TRADING, crypto, deal.crypto_amount),
            debit(NETWORK_FEES, crypto, deal.network_fee_crypto),
            credit(CUSTOMER_CRYPTO_LIABILITY, crypto, deal.crypto_amount),
            credit(NETWORK_FEES_PAYABLE, crypto, deal.network_fee_crypto),
        ]
    )


def buy_completed(deal: Deal) -> list[Entry]:
    """The sendout is confirmed: crypto and network fee leave the hot wallet; the fiat is in the bank."""
    fiat, crypto = deal.currency, deal.crypto
    return balanced(
        [
            debit(CUSTOMER_CRYPTO_LIABILITY, crypto, deal.crypto_amount),
            debit(NETWORK_FEES_PAYABLE, crypto, deal.network_fee_crypto),
            credit(HOT_WALLET_ACCOUNT, crypto, deal.crypto_amount + deal.network_fee_crypto),
            debit(BANK_ACCOUNT, fiat, deal.fiat_value),
            credit(CUSTOMER_RECEIVABLE, fiat, deal.fiat_value),
        ]
    )


def deposit_seen(crypto: str, amount: Decimal) -> list[Entry]:
    """Memo: a seller's payment seen on chain with fewer confirmations than required."""
    return balanced([debit(UNCONFIRMED_DEPOSITS, crypto, amount), credit(DEPOSITS_PENDING, crypto, amount)])


def deposit_settled(crypto: str, amount: Decimal) -> list[Entry]:
    """Reverses the memo of `deposit_seen` once the payment is confirmed (or the sell ends otherwise)."""
    return balanced([debit(DEPOSITS_PENDING, crypto, amount), credit(UNCONFIRMED_DEPOSITS, crypto, amount)])


def sell_received(deal: Deal, memo: Decimal) -> list[Entry]:
    """The seller's crypto is confirmed in the hot wallet; the service owes the payout and earns the fees."""
    fiat, crypto = deal.currency, deal.crypto
    entries = deposit_settled(crypto, memo) if memo else []
    return balanced(
        [
            *entries,
            debit(HOT_WALLET_ACCOUNT, crypto, deal.crypto_amount),
            credit(TRADING, crypto, deal.crypto_amount),
            debit(TRADING, fiat, deal.crypto_value),
            credit(PAYOUT_LIABILITY, fiat, deal.fiat_value),
            *_fees(deal),
        ]
    )


def sell_paid_out(deal: Deal) -> list[Entry]:
    """The payout leaves the bank."""
    return balanced(
        [
            debit(PAYOUT_LIABILITY, deal.currency, deal.fiat_value),
            credit(BANK_ACCOUNT, deal.currency, deal.fiat_value),
        ]
    )


def sell_blocked(deal: Deal, memo: Decimal, received: Decimal) -> list[Entry]:
    """A payment of another amount: what arrived is held in suspense until someone sorts it out."""
    entries = deposit_settled(deal.crypto, memo) if memo else []
    return balanced(
        [
            *entries,
            debit(HOT_WALLET_ACCOUNT, deal.crypto, received),
            credit(SUSPENSE, deal.crypto, received),
        ]
    )


def sell_paid_late(deal: Deal, memo: Decimal, received: Decimal) -> list[Entry]:
    """A payment first seen after the sell's validUntil: what arrived is in the hot wallet, owed back to the
    sender (received, unmatched: to refund), never paid out at the expired quote."""
    entries = deposit_settled(deal.crypto, memo) if memo else []
    return balanced(
        [
            *entries,
            debit(HOT_WALLET_ACCOUNT, deal.crypto, received),
            credit(RECEIVED_UNMATCHED, deal.crypto, received),
        ]
    )


def sell_accepted(deal: Deal) -> list[Entry]:
    """A BLOCKED sell's amount accepted (`deal`: the sell priced again on it): what suspense held is sold as
    a confirmed payment would be (Cr trading in crypto; Dr trading, Cr payout liability and the fees in
    fiat)."""
    fiat, crypto = deal.currency, deal.crypto
    return balanced(
        [
            debit(SUSPENSE, crypto, deal.crypto_amount),
            credit(TRADING, crypto, deal.crypto_amount),
            debit(TRADING, fiat, deal.crypto_value),
            credit(PAYOUT_LIABILITY, fiat, deal.fiat_value),
            *_fees(deal),
        ]
    )


def held_account(held: str) -> str:
    """Where a sell's money waits for its resolution, by the status it was held in: a BLOCKED sell's in
    suspense, a late payment's (CANCELLED) in received_unmatched."""
    return SUSPENSE if held == "BLOCKED" else RECEIVED_UNMATCHED


def refund_started(crypto: str, held: str, amount: Decimal, network_fee: Decimal) -> list[Entry]:
    """A refund decided: what was held is owed back (the amount to send) and to the network (its fee)."""
    return balanced(
        [
            debit(held_account(held), crypto, amount + network_fee),
            credit(REFUNDS_PAYABLE, crypto, amount),
            credit(NETWORK_FEES_PAYABLE, crypto, network_fee),
        ]
    )


def refund_not_sent(crypto: str, held: str, kept: Decimal) -> list[Entry]:
    """A refund whose network fee leaves nothing to send: what was held is kept as the fee."""
    return balanced([debit(held_account(held), crypto, kept), credit(REFUND_FEES_KEPT, crypto, kept)])


def refunded(crypto: str, amount: Decimal, network_fee: Decimal) -> list[Entry]:
    """The refund's sendout confirmed: the amount and its network fee leave the hot wallet."""
    return balanced(
        [
            debit(REFUNDS_PAYABLE, crypto, amount),
            debit(NETWORK_FEES_PAYABLE, crypto, network_fee),
            credit(HOT_WALLET_ACCOUNT, crypto, amount + network_fee),
        ]
    )


def adjustment(
    kind: str, asset: str, amount: Decimal, to_reserve: str, from_reserve: str | None
) -> list[Entry]:
    """An opening balance comes from equity; a move leaves one reserve for another."""
    source = EQUITY if kind == AdjustmentKind.OPENING_BALANCE else reserve_account(str(from_reserve))
    return balanced([debit(reserve_account(to_reserve), asset, amount), credit(source, asset, amount)])
