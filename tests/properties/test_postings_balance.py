"""Ledger postings as a property: a `Ledger` on PostgreSQL is driven through random buys, commits,
sendouts, sells, deposits of the right and of a wrong amount (and late ones), payouts, expiries, the
operator's resolutions (a BLOCKED sell's amount accepted or refunded, a late payment refunded, the refund's
sendout) and reserve adjustments; the Postings view follows by replay after every step.

Invariants: every event's entries balance per currency, so the cumulative postings sum to zero per currency,
in each partner's books, at EVERY position of the log; and each partner's reserves agree with a model that
books each status change of the partner's transactions and the partner's adjustments by hand (e.g. its hot
wallet = its adjustments + its sells received - its buys sent - their network fees): reserves are each
partner's own book, so another partner's trades and adjustments leave them unchanged.
"""

from __future__ import annotations

import contextlib
import itertools
import uuid
from collections import defaultdict
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import psycopg
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    initialize,
    invariant,
    multiple,
    precondition,
    rule,
    run_state_machine_as_test,
)
from psycopg import sql

from application.adapters.addresses import Bip32AddressBook
from application.adapters.prices import FixedPrices
from application.commands import (
    AdjustmentRequest,
    BuyRequest,
    DepositReport,
    ResolutionRequest,
    SellRequest,
    SendoutReport,
)
from application.ledger import Ledger
from application.settings import load_settings
from application.store.database import eventsourcing_env
from application.sweeper import OverdueTransactions
from application.use_cases import UseCases
from bench.clock import FakeClock
from domain.errors import DomainError, InsufficientReserve
from domain.transaction import Resolution, Status, Transaction, TransactionType
from projections.base.runner import ProjectionSpec, open_view, replay
from projections.ledger_postings import Postings, PostingsProjection
from projections.reserve_positions import read_positions

SETTINGS = load_settings()
ADDRESS_BOOK = Bip32AddressBook(SETTINGS.cryptos)
POSTINGS = ProjectionSpec(PostingsProjection, Postings)
REQUIRED = SETTINGS.cryptos["BTC"].required_confirmations
NETWORK_FEE = SETTINGS.cryptos["BTC"].network_fee
START = datetime(2026, 3, 10, 12, 0, tzinfo=UTC)
PLACES = {"hot-wallet": "HotWallet", "bank": "Exchange", "cold-1": "ColdStore", "exchange-1": "Exchange"}
PARTNERS = ("demo", "other")

fiat_values = st.decimals(min_value=5, max_value=900, places=2)
btc_amounts = st.integers(min_value=10_000, max_value=2_000_000).map(lambda sat: Decimal(sat).scaleb(-8))
confirmations = st.sampled_from([0, REQUIRED - 1, REQUIRED, REQUIRED + 1])
adjusted = st.tuples(
    st.sampled_from(["BTC", "ETH", "EUR", "USD"]),
    st.sampled_from(sorted(PLACES)),
    st.sampled_from(sorted(PLACES)),
    st.decimals(min_value=Decimal("0.01"), max_value=1000, places=2),
)


class PostingsMachine(RuleBasedStateMachine):
    transactions = Bundle("transactions")

    def __init__(self, database_url: str) -> None:
        """`database_url`: the session's database (its fixture); each example gets a schema of its own."""
        super().__init__()
        self.schema = f"p_{uuid.uuid4().hex[:12]}"
        self.conn = psycopg.connect(database_url, autocommit=True)
        self.conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(self.schema)))
        self.clock = FakeClock()
        env = {
            **eventsourcing_env(database_url, self.schema),
            "POSTGRES_PRE_PING": "no",
            "POSTGRES_POOL_SIZE": "2",
        }
        self.ledger = Ledger(SETTINGS, self.clock, env=env)
        self.use_cases = UseCases.of(self.ledger, FixedPrices(SETTINGS, self.clock), ADDRESS_BOOK)
        self.overdue = OverdueTransactions(self.ledger, self.use_cases.settlement)
        self.view = open_view(database_url, POSTINGS, schema=self.schema)
        self.codes = itertools.count(1)
        self.wallets: dict[str, tuple[str, str]] = {}
        self.status: dict[str, Status] = {}
        self.partner: dict[str, str] = {}
        # the model: a partner's reserve (partner, name, asset) -> total; locked and unconfirmed the same way
        self.total: dict[tuple[str, str, str], Decimal] = defaultdict(Decimal)
        self.locked: dict[tuple[str, str, str], Decimal] = defaultdict(Decimal)
        self.unconfirmed: dict[tuple[str, str, str], Decimal] = defaultdict(Decimal)
        self.refunds: set[str] = set()  # sells paid late: the payment is owed back (locked in the hot wallet)
        self.place_types: dict[tuple[str, str], str] = {
            (partner, name): PLACES[name] for partner in PARTNERS for name in ("hot-wallet", "bank")
        }

    def teardown(self) -> None:
        self.ledger.close()
        self.view.datastore.close()
        self.conn.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(self.schema)))
        self.conn.close()

    # --- customers -----------------------------------------------------------------------------------

    @initialize()
    def customers_of_a_partner_with_payouts_and_of_one_without(self) -> None:
        for index, partner in enumerate(PARTNERS):
            self.use_cases.customers.register_customer(partner, "c1", "Plus", status="ACTIVE")
            address = ADDRESS_BOOK.derive("BTC", 1000 + index).address
            account, _ = self.use_cases.customers.open_account(partner, "c1", address)
            self.wallets[partner] = (address, account.code)

    # --- transactions --------------------------------------------------------------------------------

    def attempt(self, code: str, command: Any) -> None:
        """Runs a command on the transaction; a refusal is fine (the ledger's own machine tests them).
        Whatever status the transaction reaches is booked in the model."""
        before = self.status[code]
        with contextlib.suppress(DomainError):
            command()
        self.book(self.ledger.store.transaction(self.partner[code], code), before)

    @rule(
        target=transactions, partner=st.sampled_from(["demo", "other"]), fiat=fiat_values, stage=st.booleans()
    )
    def buy(self, partner: str, fiat: Decimal, stage: bool) -> Any:
        address, _ = self.wallets[partner]
        method = "BANK_USD_BUY" if fiat > 800 else "BANK_EUR_BUY"
        currency = SETTINGS.payment_methods[method].currency
        request = BuyRequest("c1", currency, "BTC", fiat, address, method)
        try:
            transaction = self.use_cases.buys.create(partner, request, stage, f"B{next(self.codes)}")
        except DomainError:
            return multiple()
        return self.opened(transaction)

    @rule(target=transactions, partner=st.sampled_from(["demo", "other"]), crypto=btc_amounts)
    def sell(self, partner: str, crypto: Decimal) -> Any:
        _, account = self.wallets[partner]
        request = SellRequest("c1", account, "EUR", "BTC", "BANK_EUR_SELL", crypto_amount=crypto)
        try:
            transaction = self.use_cases.sells.create(partner, request, f"S{next(self.codes)}")
        except DomainError:
            return multiple()
        return self.opened(transaction)

    def opened(self, transaction: Transaction) -> str:
        self.status[transaction.code] = (
            Status.STAGED if transaction.type == TransactionType.BUY else Status.INITIATED
        )
        self.partner[transaction.code] = transaction.order.partner
        self.book(transaction, self.status[transaction.code])
        return transaction.code

    @rule(code=transactions)
    def commit(self, code: str) -> None:
        self.attempt(code, lambda: self.use_cases.buys.commit(self.partner[code], code))

    @rule(code=transactions, confirmations=confirmations)
    def sendout(self, code: str, confirmations: int) -> None:
        report = SendoutReport(code, f"out-{code}", confirmations)
        self.attempt(code, lambda: self.use_cases.settlement.report_sendout(self.partner[code], report))

    @rule(
        code=transactions,
        right_amount=st.sampled_from([True, True, True, False]),
        confirmations=confirmations,
    )
    def deposit(self, code: str, right_amount: bool, confirmations: int) -> None:
        transaction = self.ledger.store.transaction(self.partner[code], code)
        amount = transaction.order.quote.crypto_amount + (0 if right_amount else Decimal("0.00000007"))
        address = transaction.order.destination_address
        report = DepositReport("BTC", address, f"in-{code}", amount, confirmations)
        self.attempt(code, lambda: self.use_cases.settlement.report_deposit(self.partner[code], report))

    @rule(code=transactions, complete=st.booleans())
    def payout(self, code: str, complete: bool) -> None:
        action = self.use_cases.settlement.pay_out if complete else self.use_cases.settlement.confirm_payout
        self.attempt(code, lambda: action(self.partner[code], code, "REF"))

    @rule(code=transactions, accept=st.booleans())
    def resolve(self, code: str, accept: bool) -> None:
        """The operator's resolution: a BLOCKED sell's amount accepted, or refunded (a late payment too)."""
        kind = Resolution.ACCEPT_RECEIVED if accept else Resolution.REFUND
        request = ResolutionRequest(kind, "decided by the operator")
        self.attempt(code, lambda: self.use_cases.resolutions.resolve(self.partner[code], code, request))

    @rule(code=transactions, accept=st.booleans(), short=st.sampled_from(["0.00000007", "0.00000500"]))
    def a_payment_of_another_amount_resolved(self, code: str, accept: bool, short: str) -> None:
        """A sell paid another amount (BLOCKED) that the operator resolves, its refund sent, so that the
        examples reach every resolution."""
        transaction = self.ledger.store.transaction(self.partner[code], code)
        if transaction.type != TransactionType.SELL or self.status[code] != Status.INITIATED:
            return
        report = DepositReport(
            "BTC",
            transaction.order.destination_address,
            f"in-{code}",
            transaction.order.quote.crypto_amount - Decimal(short),
            REQUIRED,
        )
        self.attempt(code, lambda: self.use_cases.settlement.report_deposit(self.partner[code], report))
        self.resolve(code, accept)
        if self.status[code] == Status.REFUNDING:
            self.sendout(code, REQUIRED)

    @rule(code=transactions)
    def drive(self, code: str) -> None:
        """The next command on the way to completion, so that examples reach the later states."""
        status = self.status[code]
        if status == Status.STAGED:
            self.commit(code)
        elif status == Status.SENDING:
            self.sendout(code, REQUIRED)
        elif status in (Status.INITIATED, Status.CONFIRMING):
            self.deposit(code, True, REQUIRED)
        elif status in (Status.BLOCKED, Status.CANCELLED):
            self.resolve(code, accept=False)
        elif status == Status.REFUNDING:
            self.sendout(code, REQUIRED)
        else:
            self.payout(code, complete=True)

    @precondition(lambda self: self.status)
    @rule(minutes=st.sampled_from([5, 31, 240]))
    def time_passes_and_the_overdue_lapse(self, minutes: int) -> None:
        self.clock.at += timedelta(minutes=minutes)
        for code in self.overdue.expire_overdue():
            self.attempt(code, lambda: None)

    # --- adjustments ---------------------------------------------------------------------------------

    @rule(partner=st.sampled_from(PARTNERS), adjustment=adjusted, move=st.booleans())
    def adjust(self, partner: str, adjustment: tuple[str, str, str, Decimal], move: bool) -> None:
        asset, to, source, amount = adjustment
        amount = amount if asset in SETTINGS.currencies else amount / 100
        request = AdjustmentRequest(
            "Move" if move else "OpeningBalance",
            asset,
            amount,
            to,
            PLACES[to],
            source if move else None,
            PLACES[source] if move else None,
        )
        crypto_only = {PLACES[to], PLACES[source] if move else "Exchange"} & {"HotWallet", "ColdStore"}
        if (move and to == source) or (crypto_only and asset not in SETTINGS.cryptos):
            try:
                self.use_cases.reserves.record_adjustment(partner, request)
            except DomainError:
                return
            raise AssertionError(f"{request} should have been refused")
        held = self.total[partner, source, asset]
        if move and held < amount:  # a move never takes a reserve below zero, counted in its partner's books
            try:
                self.use_cases.reserves.record_adjustment(partner, request)
            except InsufficientReserve:
                return
            raise AssertionError(f"{request} overdraws {partner}'s {source}: it holds {held}")
        self.use_cases.reserves.record_adjustment(partner, request)
        self.total[partner, to, asset] += amount
        self.place_types[partner, to] = PLACES[to]
        if move:
            self.total[partner, source, asset] -= amount
            self.place_types[partner, source] = PLACES[source]

    # --- the model -----------------------------------------------------------------------------------

    def book(self, transaction: Transaction, before: Status) -> None:
        """What a change of status moves, as an accountant would book it by hand."""
        now, order, code = transaction.status, transaction.order, transaction.code
        self.status[code] = now
        quote = order.quote
        hot, bank = (order.partner, "hot-wallet", order.crypto), (order.partner, "bank", order.currency)
        paid_late = order.type == TransactionType.SELL and now == Status.CANCELLED and transaction.payment
        if paid_late and code not in self.refunds:  # first seen after validUntil: received, to refund
            self.refunds.add(code)
            self.total[hot] += transaction.payment.amount
            self.locked[hot] += transaction.payment.amount
        if now == before:
            return
        if order.type == TransactionType.SELL and before in (
            Status.BLOCKED,
            Status.CANCELLED,
            Status.REFUNDING,
        ):
            self.resolved(transaction, before)
            return
        if order.type == TransactionType.BUY:
            owed = quote.crypto_amount + quote.fees.network_crypto
            if now == Status.SENDING:
                self.locked[hot] += owed
            elif now == Status.COMPLETED:
                self.locked[hot] -= owed
                self.total[hot] -= owed
                self.total[bank] += quote.fiat_value
            return
        if before == Status.CONFIRMING:
            self.unconfirmed[hot] -= quote.crypto_amount
        if now == Status.CONFIRMING:
            self.unconfirmed[hot] += quote.crypto_amount
        if now in (Status.TO_PAYOUT, Status.COMPLETED) and before in (Status.INITIATED, Status.CONFIRMING):
            self.total[hot] += quote.crypto_amount
            self.locked[bank] += quote.fiat_value
        if now == Status.COMPLETED:
            self.locked[bank] -= quote.fiat_value
            self.total[bank] -= quote.fiat_value
        if now == Status.BLOCKED:
            self.total[hot] += transaction.payment.amount

    def resolved(self, transaction: Transaction, before: Status) -> None:
        """A resolution, booked by hand: an accepted amount is a confirmed payment (the crypto came in when it
        was BLOCKED); a refund owes back what was received (the amount and its network fee, locked in the
        hot wallet) until its sendout takes it out, or keeps it all when the fee leaves nothing to send."""
        now, order = transaction.status, transaction.order
        hot, bank = (order.partner, "hot-wallet", order.crypto), (order.partner, "bank", order.currency)
        received = transaction.payment.amount
        if now in (Status.TO_PAYOUT, Status.COMPLETED):
            self.locked[bank] += order.quote.fiat_value
        if now == Status.COMPLETED:
            self.locked[bank] -= order.quote.fiat_value
            self.total[bank] -= order.quote.fiat_value
        owed_already = before in (Status.CANCELLED, Status.REFUNDING)  # a late payment is locked since
        if now == Status.REFUNDING and not owed_already:
            self.locked[hot] += received
        if now == Status.REFUNDED and before == Status.REFUNDING:
            self.locked[hot] -= received
            self.total[hot] -= received
        elif now == Status.REFUNDED and owed_already:  # not sent: kept, no longer owed
            self.locked[hot] -= received

    # --- invariants ----------------------------------------------------------------------------------

    @invariant()
    def postings_balance_at_every_position_and_the_reserves_agree_with_the_model(self) -> None:
        head = replay(self.ledger, POSTINGS, self.view)
        assert head == (self.ledger.recorder.max_notification_id() or 0)
        postings = sql.Identifier(self.schema, "postings")
        per_event = self.conn.execute(
            sql.SQL(
                "SELECT notification_id, currency_code, sum(debit - credit) FROM {} GROUP BY 1, 2"
                " HAVING sum(debit - credit) <> 0"
            ).format(postings)
        ).fetchall()
        assert per_event == []
        running = self.conn.execute(
            sql.SQL(
                "SELECT notification_id, partner, currency_code, sum(sum(debit - credit)) OVER"
                " (PARTITION BY partner, currency_code ORDER BY notification_id) FROM {} GROUP BY 1, 2, 3"
            ).format(postings)
        ).fetchall()
        assert {total for *_, total in running} <= {Decimal(0)}
        for partner in PARTNERS:
            self.reserves_agree(partner)

    def reserves_agree(self, partner: str) -> None:
        """The partner's reserves as `GET /reserves` reads them: exactly its own, as the model has them."""
        found = {(partner, p.name, p.code): p for p in read_positions(self.conn, partner, schema=self.schema)}
        keys = {key for key in (*self.total, *self.locked, *self.unconfirmed) if key[0] == partner}
        for key in keys:
            position = found.get(key)
            expected = (self.total[key], self.locked[key], self.unconfirmed[key])
            if position is None:
                assert expected == (0, 0, 0), key
                continue
            assert (position.total, position.locked, position.unconfirmed) == expected, key
            assert position.available == position.total - position.locked
            assert position.type == self.place_types[partner, key[1]]
        assert set(found) <= keys


def test_postings_sum_to_zero_per_currency_and_reserves_follow_the_transactions(database_url: str) -> None:
    # the machine gets the fixture from a factory closing over it (Hypothesis's pattern for pytest fixtures)
    run_state_machine_as_test(
        lambda: PostingsMachine(database_url),
        settings=settings(
            max_examples=15,
            stateful_step_count=35,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow],
        ),
    )
