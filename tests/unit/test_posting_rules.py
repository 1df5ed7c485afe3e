"""The posting rules per event, through `PostingsProjection` on an in-memory view: each event's entries
balance per currency and go to the accounts of the chart; events that move no money post nothing."""

from __future__ import annotations

from collections import defaultdict
from datetime import timedelta
from decimal import Decimal
from typing import Any
from uuid import UUID

import pytest
from eventsourcing.persistence import Tracking

from domain.reserves import AdjustmentKind, Movement, Reserve, ReserveAdjustment, ReserveType
from domain.transaction import ChainPayment
from projections import posting_rules as rules
from projections.ledger_postings import DealState, Posting, PostingsProjection
from projections.posting_rules import Entry, UnbalancedPosting
from tests.unit.builders import BTC, LATER, NOW, REQUIRED, VALID_UNTIL, deposit, initiated_sell, staged_buy


class MemoryPostings:
    """The `Postings` view's interface, in memory."""

    def __init__(self) -> None:
        self.deals: dict[UUID, DealState] = {}
        self.postings: list[Posting] = []
        self.skipped: list[int] = []
        self.places: list[tuple[str, str, str, Any]] = []
        self.reports: list[tuple[Any, ...]] = []  # the chain reports kept for the reconciliation

    def deal_state(self, deal_id: UUID) -> DealState | None:
        return self.deals.get(deal_id)

    def skip(self, tracking: Tracking) -> None:
        self.skipped.append(tracking.notification_id)

    def record(self, tracking: Tracking, posting: Posting | None = None, **changes: Any) -> None:
        if posting is not None:
            rules.balanced(posting.entries)
            self.postings.append(posting)
        if changes.get("deal_id") is not None:
            if changes.get("state") is None:
                self.deals.pop(changes["deal_id"], None)
            else:
                self.deals[changes["deal_id"]] = changes["state"]
        self.places.extend(changes.get("places", ()))
        if changes.get("report") is not None:
            self.reports.append(changes["report"])


class Books:
    """Feeds events to the projection and sums what it posted, per (account, currency)."""

    def __init__(self) -> None:
        self.view = MemoryPostings()
        self.projection = PostingsProjection(view=self.view)  # type: ignore[arg-type]
        self.position = 0

    def process(self, *aggregates: Any) -> list[Posting]:
        before = len(self.view.postings)
        for aggregate in aggregates:
            for event in aggregate.collect_events():
                self.position += 1
                self.projection.process_event(event, Tracking("Ledger", self.position))
        return self.view.postings[before:]

    def balances(self) -> dict[tuple[str, str], Decimal]:
        sums: dict[tuple[str, str], Decimal] = defaultdict(Decimal)
        for posting in self.view.postings:
            for e in posting.entries:
                sums[e.account, e.currency] += e.debit - e.credit
        return {key: total for key, total in sums.items() if total}


def lines(posting: Posting) -> dict[tuple[str, str], Decimal]:
    """Debit (positive) or credit (negative) per account and currency."""
    found: dict[tuple[str, str], Decimal] = defaultdict(Decimal)
    for e in posting.entries:
        found[e.account, e.currency] += e.debit - e.credit
    return dict(found)


def assert_balanced(posting: Posting) -> None:
    per_currency: dict[str, Decimal] = defaultdict(Decimal)
    for e in posting.entries:
        per_currency[e.currency] += e.debit - e.credit
    assert set(per_currency.values()) <= {Decimal(0)}, posting


@pytest.fixture
def books() -> Books:
    return Books()


def test_a_committed_buy_is_owed_its_fiat_and_owes_its_crypto_and_network_fee(books: Books) -> None:
    buy = staged_buy()
    assert books.process(buy) == []
    buy.commit(LATER)
    [committed] = books.process(buy)
    assert_balanced(committed)
    quote = buy.order.quote
    fees = quote.fees
    assert (committed.event, committed.partner, committed.transaction_code) == (
        "Committed",
        "partner-a",
        buy.code,
    )
    assert lines(committed) == {
        ("customer_receivable", "EUR"): quote.fiat_value,
        ("fee_revenue", "EUR"): -fees.partner_fiat,
        ("bank_fees", "EUR"): -fees.bank_fiat,
        ("network_fee_recovery", "EUR"): -fees.network_fiat,
        ("trading", "EUR"): -quote.crypto_value,
        ("trading", "BTC"): quote.crypto_amount,
        ("network_fees", "BTC"): fees.network_crypto,
        ("customer_crypto_liability", "BTC"): -quote.crypto_amount,
        ("network_fees_payable", "BTC"): -fees.network_crypto,
    }


def test_a_completed_buy_sends_crypto_and_fee_from_the_hot_wallet_and_banks_the_fiat(books: Books) -> None:
    buy = staged_buy()
    buy.commit(LATER)
    books.process(buy)
    buy.report_sendout(ChainPayment("out-1", 0), REQUIRED, LATER)
    assert books.process(buy) == []  # seen, not confirmed: nothing moves yet
    buy.report_sendout(ChainPayment("out-1", REQUIRED), REQUIRED, LATER)
    [completed] = books.process(buy)
    assert_balanced(completed)
    quote = buy.order.quote
    sent = quote.crypto_amount + quote.fees.network_crypto
    assert lines(completed) == {
        ("customer_crypto_liability", "BTC"): quote.crypto_amount,
        ("network_fees_payable", "BTC"): quote.fees.network_crypto,
        ("reserve:hot-wallet", "BTC"): -sent,
        ("reserve:bank", "EUR"): quote.fiat_value,
        ("customer_receivable", "EUR"): -quote.fiat_value,
    }
    balances = books.balances()
    assert ("customer_receivable", "EUR") not in balances
    assert ("customer_crypto_liability", "BTC") not in balances
    assert books.view.deals == {}  # a final transaction is forgotten


def test_a_sell_seen_on_chain_is_memoed_as_unconfirmed_once_and_each_report_kept(books: Books) -> None:
    sell = initiated_sell()
    sell.report_deposit(deposit(sell, confirmations=1), REQUIRED, True, LATER)
    sell.report_deposit(deposit(sell, confirmations=2), REQUIRED, True, LATER)
    [memo] = books.process(sell)
    amount = sell.order.quote.crypto_amount
    assert lines(memo) == {("unconfirmed_deposits", "BTC"): amount, ("deposits_pending", "BTC"): -amount}
    assert books.view.skipped == []  # the second Confirming posts nothing, but its report is kept
    assert len(books.view.reports) == 2


def test_a_confirmed_sell_receives_crypto_owes_its_payout_and_reverses_the_memo(books: Books) -> None:
    sell = initiated_sell()
    sell.report_deposit(deposit(sell, confirmations=1), REQUIRED, True, LATER)
    books.process(sell)
    sell.report_deposit(deposit(sell), REQUIRED, True, LATER)
    [received] = books.process(sell)
    assert_balanced(received)
    quote = sell.order.quote
    fees = quote.fees
    assert lines(received) == {
        ("unconfirmed_deposits", "BTC"): -quote.crypto_amount,
        ("deposits_pending", "BTC"): quote.crypto_amount,
        ("reserve:hot-wallet", "BTC"): quote.crypto_amount,
        ("trading", "BTC"): -quote.crypto_amount,
        ("trading", "EUR"): quote.crypto_value,
        ("payout_liability", "EUR"): -quote.fiat_value,
        ("fee_revenue", "EUR"): -fees.partner_fiat,
        ("bank_fees", "EUR"): -fees.bank_fiat,
        ("network_fee_recovery", "EUR"): -fees.network_fiat,
    }
    assert ("unconfirmed_deposits", "BTC") not in books.balances()


def test_a_payout_is_paid_from_the_bank_and_payout_confirming_posts_nothing(books: Books) -> None:
    sell = initiated_sell()
    sell.report_deposit(deposit(sell), REQUIRED, True, LATER)
    books.process(sell)
    sell.confirm_payout(True, LATER, "ref", None)
    assert books.process(sell) == []
    sell.pay_out(True, LATER, "ref", None)
    [paid] = books.process(sell)
    payout = sell.order.quote.fiat_value
    assert lines(paid) == {("payout_liability", "EUR"): payout, ("reserve:bank", "EUR"): -payout}
    assert ("payout_liability", "EUR") not in books.balances()


def test_a_sell_completed_without_payouts_receives_and_pays_out_at_once(books: Books) -> None:
    sell = initiated_sell()
    sell.report_deposit(deposit(sell), REQUIRED, False, LATER)
    [completed] = books.process(sell)
    assert_balanced(completed)
    quote = sell.order.quote
    posted = lines(completed)
    assert posted[("reserve:hot-wallet", "BTC")] == quote.crypto_amount
    assert posted[("reserve:bank", "EUR")] == -quote.fiat_value
    assert posted[("payout_liability", "EUR")] == 0
    assert ("payout_liability", "EUR") not in books.balances()


def test_a_payment_of_another_amount_is_held_in_suspense(books: Books) -> None:
    sell = initiated_sell()
    received = sell.order.quote.crypto_amount + BTC.quantum
    sell.report_deposit(ChainPayment("tx-1", REQUIRED, received), REQUIRED, True, LATER)
    [blocked] = books.process(sell)
    assert lines(blocked) == {("reserve:hot-wallet", "BTC"): received, ("suspense", "BTC"): -received}


def test_cancelled_transactions_post_nothing(books: Books) -> None:
    buy, sell = staged_buy(code="TXB"), initiated_sell(code="TXS")
    late = VALID_UNTIL + timedelta(seconds=1)
    buy.expire(late)
    sell.expire(late)
    assert books.process(buy, sell) == []
    assert list(books.view.deals) == [sell.id]  # an expired sell's deal is kept: it may still be paid late
    assert books.view.skipped == []  # each forgot (or kept) its deal in a recording of its own


@pytest.mark.parametrize("swept_first", [True, False], ids=["after the sweep", "before the sweep"])
def test_a_late_payment_is_received_unmatched_in_the_hot_wallet_and_never_paid_out(
    books: Books, swept_first: bool
) -> None:
    sell = initiated_sell()
    late = VALID_UNTIL + timedelta(seconds=1)
    if swept_first:
        sell.expire(late)
    received = sell.order.quote.crypto_amount
    sell.report_deposit(ChainPayment("tx-1", REQUIRED, received), REQUIRED, True, late)
    [paid_late] = books.process(sell)
    assert paid_late.event == "PaidLate"
    assert lines(paid_late) == {
        ("reserve:hot-wallet", "BTC"): received,
        ("received_unmatched", "BTC"): -received,
    }
    assert list(books.view.deals) == [sell.id]  # kept: the operator may refund it
    assert rules.RECEIVED_UNMATCHED in rules.LOCKED_ACCOUNTS["hot-wallet"]


def test_an_accepted_amount_is_sold_out_of_suspense_at_the_price_quoted(books: Books) -> None:
    sell = initiated_sell()
    received = sell.order.quote.crypto_amount / 2
    sell.report_deposit(ChainPayment("tx-1", REQUIRED, received), REQUIRED, True, LATER)
    sell.accept_received(lambda _: sell.order, True, "agreed", LATER)  # priced again: here, as it was
    [_, accepted] = books.process(sell)
    quote = sell.order.quote
    assert_balanced(accepted)
    assert accepted.event == "ReceivedAccepted"
    posted = lines(accepted)
    assert posted[("suspense", "BTC")] == quote.crypto_amount
    assert posted[("payout_liability", "EUR")] == -quote.fiat_value
    assert ("reserve:hot-wallet", "BTC") not in posted  # it came in when the sell was blocked


@pytest.mark.parametrize("late", [False, True], ids=["blocked", "paid late"])
def test_a_refund_is_owed_from_where_the_money_waited_until_its_sendout_takes_it_out(
    books: Books, late: bool
) -> None:
    sell = initiated_sell()
    received = sell.order.quote.crypto_amount + (0 if late else BTC.quantum)
    at = VALID_UNTIL + timedelta(seconds=1) if late else LATER
    sell.report_deposit(ChainPayment("tx-1", REQUIRED, received), REQUIRED, True, at)
    fee = Decimal("0.00002")
    sell.refund("bc1-refund", fee, "agreed", at)
    sell.report_sendout(ChainPayment("refund-1", REQUIRED), REQUIRED, at)
    [_, started, refunded] = books.process(sell)
    held = rules.RECEIVED_UNMATCHED if late else rules.SUSPENSE
    assert lines(started) == {
        (held, "BTC"): received,
        ("refunds_payable", "BTC"): -(received - fee),
        ("network_fees_payable", "BTC"): -fee,
    }
    assert lines(refunded) == {
        ("refunds_payable", "BTC"): received - fee,
        ("network_fees_payable", "BTC"): fee,
        ("reserve:hot-wallet", "BTC"): -received,
    }
    assert books.view.deals == {}


def test_a_refund_the_fee_would_eat_is_kept(books: Books) -> None:
    sell = initiated_sell()
    received = BTC.quantum
    sell.report_deposit(ChainPayment("tx-1", REQUIRED, received), REQUIRED, True, LATER)
    sell.refund("bc1-refund", Decimal("0.00002"), "agreed", LATER)
    [_, kept] = books.process(sell)
    assert kept.event == "RefundNotSent"
    assert lines(kept) == {("suspense", "BTC"): received, ("refund_fees_kept", "BTC"): -received}


def test_an_opening_balance_comes_from_equity_and_a_move_leaves_one_reserve_for_another(books: Books) -> None:
    hot = Reserve("hot-wallet", ReserveType.HOT_WALLET)
    cold = Reserve("cold-1", ReserveType.COLD_STORE)
    opening = Movement(AdjustmentKind.OPENING_BALANCE, BTC, True, Decimal("2.5"), hot)
    move = Movement(AdjustmentKind.MOVE, BTC, True, Decimal("1"), cold, hot)
    [opened, moved] = books.process(
        ReserveAdjustment.record("demo", "RA1", opening, None, NOW),
        ReserveAdjustment.record("other", "RA2", move, "to cold", NOW),
    )
    assert (opened.partner, opened.adjustment_code, opened.transaction_code) == ("demo", "RA1", None)
    assert lines(opened) == {
        ("reserve:hot-wallet", "BTC"): Decimal("2.5"),
        ("equity", "BTC"): Decimal("-2.5"),
    }
    assert moved.partner == "other"  # in the books of the partner whose operator moved it
    assert lines(moved) == {("reserve:cold-1", "BTC"): Decimal(1), ("reserve:hot-wallet", "BTC"): Decimal(-1)}
    assert [(partner, name, kind) for partner, name, kind, _ in books.view.places] == [
        ("other", "cold-1", "ColdStore")
    ]


def test_balanced_refuses_entries_that_do_not_add_up_per_currency() -> None:
    with pytest.raises(UnbalancedPosting):
        rules.balanced([rules.debit("a", "EUR", Decimal(1)), rules.credit("b", "USD", Decimal(1))])
    with pytest.raises(UnbalancedPosting):
        rules.balanced([Entry("a", "EUR", debit=Decimal(-1)), Entry("b", "EUR", credit=Decimal(-1))])
    kept = rules.balanced([rules.debit("a", "EUR", Decimal(0)), rules.credit("b", "EUR", Decimal(0))])
    assert kept == []


def test_the_projection_never_records_an_unbalanced_posting(books: Books, monkeypatch: Any) -> None:
    buy = staged_buy()
    books.process(buy)
    monkeypatch.setattr(rules, "buy_committed", lambda deal: [rules.debit("x", deal.currency, Decimal(1))])
    buy.commit(LATER)
    with pytest.raises(UnbalancedPosting):
        books.process(buy)
    assert books.view.postings == []


def test_every_rule_balances_for_amounts_of_every_precision() -> None:
    deal = rules.Deal(
        partner="p",
        code="c",
        type="BROKERBUY",
        crypto="ETH",
        currency="EUR",
        crypto_amount=Decimal("0.123456789012345678"),
        network_fee_crypto=Decimal("0.0005"),
        fiat_value=Decimal("400.00"),
        crypto_value=Decimal("370.38"),
        partner_fee=Decimal("6.00"),
        bank_fee=Decimal("0.50"),
        network_fee_fiat=Decimal("23.12"),
    )
    assert deal.crypto_value + deal.partner_fee + deal.bank_fee + deal.network_fee_fiat == deal.fiat_value
    assert rules.Deal.from_json(deal.to_json()) == deal
    for entries in (
        rules.buy_committed(deal),
        rules.buy_completed(deal),
        rules.sell_paid_out(deal),
        rules.sell_blocked(deal, Decimal("0.1"), Decimal("0.2")),
        rules.sell_paid_late(deal, Decimal("0.1"), Decimal("0.2")),
        rules.adjustment("OpeningBalance", "EUR", Decimal("1.5"), "bank", None),
    ):
        assert rules.balanced(entries) == entries
