"""Double-entry ledger postings: every money-moving event of a buy, a sell or a reserve adjustment posts
balanced entries, in fiat and in crypto, to `read.postings`, and keeps `read.balances` (partner x account x
currency) and `read.daily_balances` (the same per UTC day, `projections.daily_balances`) up to date in the
same database transaction. For every currency, debits equal credits after every
event, and so within each partner's books.

Every posting is a partner's: a transaction's is its partner's, an adjustment's the partner whose operator
recorded it. Each partner has the whole chart of accounts below to itself, its own `reserve:hot-wallet` and
`reserve:bank` included: reserves are each partner's own book (`domain.reserves`), and `read.balances` and
`read.reserve_places` have the partner in their keys.

Chart of accounts (a balance is debits minus credits; reserves are `reserve:<name>`):

| account | assets | holds |
|---|---|---|
| `reserve:bank` | fiat | the Exchange reserve: buyers' payments in, sellers' payouts out |
| `reserve:hot-wallet` | crypto | the HotWallet reserve: sellers' crypto in; buyers' crypto, fees out |
| `reserve:<name>` | both | any other reserve named by operator adjustments (Exchange, HotWallet, ColdStore) |
| `customer_receivable` | fiat | buyers' payments owed for committed buys, until the buy completes |
| `customer_crypto_liability` | crypto | crypto owed to buyers of committed buys (locked in the hot wallet) |
| `network_fees_payable` | crypto | network fees of committed buys' sendouts (locked in the hot wallet) |
| `network_fees` | crypto | network fees spent on sendouts (expense) |
| `payout_liability` | fiat | payouts owed to sellers whose crypto is confirmed (locked in the bank) |
| `fee_revenue`, `bank_fees`, `network_fee_recovery` | fiat | the partner, bank and network fees charged |
| `trading` | both | the conversion between fiat and crypto at the executed price |
| `unconfirmed_deposits`, `deposits_pending` | crypto | memo pair: sellers' payments seen, unconfirmed |
| `suspense` | crypto | payments of a wrong amount (BLOCKED sells), held until sorted out |
| `received_unmatched` | crypto | late payments to expired sells, to refund (locked in the hot wallet) |
| `refunds_payable` | crypto | refunds decided, until their sendout is confirmed (locked in the hot wallet) |
| `refund_fees_kept` | crypto | what a refund kept when the network fee left nothing to send back |
| `equity` | both | opening balances recorded by the operator |

When each event posts:
- buy `Committed`: Dr receivable (fiat value); Cr fees and Cr trading (crypto value) in fiat; Dr trading
  (crypto amount) and Dr network_fees, Cr customer_crypto_liability and Cr network_fees_payable in crypto.
- buy `Completed`: the liabilities are settled from the hot wallet (crypto amount plus network fee); the
  receivable is settled into the bank.
- sell `Confirming` (first time): memo Dr unconfirmed_deposits, Cr deposits_pending (crypto amount).
- sell `ToPayout`: memo reversed; Dr hot wallet, Cr trading (crypto); Dr trading (crypto value), Cr
  payout_liability (payout) and Cr fees (fiat). Sell `PaidOut`: Dr payout_liability, Cr bank.
- sell `Completed` (confirmed, partner without Payouts): both of the above at once.
- sell `Blocked`: memo reversed; the amount received Dr hot wallet, Cr suspense (the deal kept until the
  operator resolves it).
- `Cancelled`: nothing to post (a staged buy or an unpaid sell has posted nothing); the deal is forgotten,
  but an expired sell's is kept: a payment may still arrive late.
- sell `PaidLate` (a payment first seen after validUntil; the sell is CANCELLED): the amount received Dr hot
  wallet, Cr received_unmatched (to refund); the deal kept until the refund.
- sell `ReceivedAccepted` (a BLOCKED sell's amount accepted, priced again on it): Dr suspense, Cr trading
  (crypto); Dr trading (crypto value), Cr payout_liability (payout) and Cr fees (fiat); with the payout
  (as `Completed`) for a partner without Payouts.
- sell `RefundStarted`: what was held (suspense for a BLOCKED sell, received_unmatched for a late payment)
  Dr, Cr refunds_payable (the amount to send back) and Cr network_fees_payable (its fee); `RefundNotSent`
  (the fee leaves nothing to send): Dr what was held, Cr refund_fees_kept; `Refunded` (the refund's sendout
  confirmed): Dr refunds_payable and network_fees_payable, Cr hot wallet.
- `ReserveAdjustment.Recorded`: opening balance Dr reserve, Cr equity; move Dr target, Cr source reserve,
  in the books of the adjustment's partner.
Every other event (customers, accounts, limits, `SendoutSeen`, `PayoutConfirming`...) only moves the
position. The rules themselves are in `projections.posting_rules`. Beside the postings, in the same
transactions, the view keeps `read.chain_reports` (`projections.chain_reports`): the chain reports and
commits a reconciliation matches against these postings, by partner and time.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import Any
from uuid import UUID

from eventsourcing.dispatch import singledispatchmethod
from eventsourcing.persistence import Tracking
from eventsourcing.projection import Projection
from psycopg import Cursor
from psycopg.rows import DictRow
from psycopg.sql import SQL, Composed

from domain.chain_reports import DisputedReport
from domain.reserves import BUILT_IN, ReserveAdjustment
from domain.transaction import Transaction, TransactionType
from projections import chain_reports, daily_balances
from projections import posting_rules as rules
from projections.base.json_rows import ANY_ID, as_json, json_rows
from projections.base.postgres import ReadModel
from projections.partner_policies import mapping_statements, partner_rows, whole_ledger_rows
from projections.posting_rules import Deal, Entry

POSTINGS = """CREATE TABLE IF NOT EXISTS {postings} (
    notification_id bigint NOT NULL,
    entry integer NOT NULL,
    event text NOT NULL,
    partner text NOT NULL,
    transaction_code text,
    adjustment_code text,
    account text NOT NULL,
    currency_code text NOT NULL,
    debit numeric NOT NULL,
    credit numeric NOT NULL,
    at timestamptz NOT NULL,
    PRIMARY KEY (notification_id, entry))"""
POSTINGS_INDEX = """CREATE INDEX IF NOT EXISTS postings_by_transaction
    ON {postings} (partner, transaction_code)"""
BALANCES = """CREATE TABLE IF NOT EXISTS {balances} (
    partner text NOT NULL,
    account text NOT NULL,
    currency_code text NOT NULL,
    debit numeric NOT NULL,
    credit numeric NOT NULL,
    balance numeric NOT NULL,
    updated timestamptz NOT NULL,
    notification_id bigint NOT NULL,
    PRIMARY KEY (partner, account, currency_code))"""
DEALS = """CREATE TABLE IF NOT EXISTS {posting_deals} (
    id uuid PRIMARY KEY,
    deal jsonb NOT NULL,
    memo numeric NOT NULL,
    received boolean NOT NULL)"""
PLACES = """CREATE TABLE IF NOT EXISTS {reserve_places} (
    partner text NOT NULL,
    name text NOT NULL,
    type text NOT NULL,
    created timestamptz NOT NULL,
    PRIMARY KEY (partner, name))"""
# Whether the view's tables are of the shape before reserves were each partner's own book (balances
# without a partner), or before the chain reports were kept beside them: such tables cannot hold a partner's
# books (or lack the reports of the events they posted), and are dropped to be rebuilt from the log.
SHARED_BOOK_SHAPE = """SELECT (EXISTS (SELECT FROM information_schema.tables
        WHERE table_schema = %(schema)s AND table_name = 'balances')
    AND NOT EXISTS (SELECT FROM information_schema.columns
        WHERE table_schema = %(schema)s AND table_name = 'balances' AND column_name = 'partner'))
    OR (EXISTS (SELECT FROM information_schema.tables
        WHERE table_schema = %(schema)s AND table_name = 'postings')
    AND NOT EXISTS (SELECT FROM information_schema.tables
        WHERE table_schema = %(schema)s AND table_name = 'chain_reports')) AS shared"""


@dataclass(frozen=True)
class DealState:
    """An open transaction as the projection remembers it: its amounts, its memo, whether it was received."""

    deal: Deal
    memo: Decimal = Decimal(0)
    received: bool = False


@dataclass(frozen=True)
class Posting:
    """The entries of one event of a partner, and what they are about."""

    event: str
    at: datetime
    entries: list[Entry]
    partner: str
    transaction_code: str | None = None
    adjustment_code: str | None = None


@dataclass
class PendingPostings:
    """The postings of the events of a batch, and what they add to each balance (partner x account x
    currency): debits, credits, and the time and position of the last event posting to it."""

    rows: list[tuple[Any, ...]] = field(default_factory=list)
    balances: dict[tuple[str, str, str], list[Any]] = field(default_factory=dict)
    days: daily_balances.DailyTotals = field(default_factory=daily_balances.DailyTotals)

    def add(self, position: int, posting: Posting, entries: list[Entry]) -> None:
        source = (position, posting.event, posting.partner, posting.transaction_code, posting.adjustment_code)
        for number, e in enumerate(entries, start=1):
            self.rows.append((*source, number, e.account, e.currency, e.debit, e.credit, posting.at))
            key = (posting.partner, e.account, e.currency)
            totals = self.balances.setdefault(key, [Decimal(0), Decimal(0), None, None])
            totals[0] += e.debit
            totals[1] += e.credit
            totals[2:] = [posting.at, position]
            self.days.add(key, posting.at, position, e.debit, e.credit)

    def balance_rows(self) -> list[tuple[Any, ...]]:
        return [
            (partner, account, currency, dr, cr, dr - cr, at, position)
            for (partner, account, currency), (dr, cr, at, position) in sorted(self.balances.items())
        ]


class Postings(ReadModel):
    tables = (
        "postings",
        "balances",
        "posting_deals",
        "reserve_places",
        chain_reports.TABLE,
        daily_balances.TABLE,
    )

    def create_statements(self) -> list[Composed]:
        """The tables, with their policies: a partner's books (`partner_rows`); the deals, no one partner's
        table, `whole_ledger_rows` (`projections.partner_policies`)."""
        names = {name: self.table(name) for name in self.tables}
        statements = mapping_statements(self.table)
        statements += [
            SQL(ddl).format(**names) for ddl in (POSTINGS, POSTINGS_INDEX, BALANCES, DEALS, PLACES)
        ]
        statements += chain_reports.create_statements(self.table)
        statements += daily_balances.create_statements(self.table)
        partners = ("postings", "balances", "reserve_places", chain_reports.TABLE, daily_balances.TABLE)
        statements += [partner_rows(self.table, name) for name in partners]
        return [*statements, whole_ledger_rows(self.table, "posting_deals")]

    def _create_table(self, curs: Cursor[DictRow]) -> None:
        """Creates the tables, after dropping those of the shape before reserves were each partner's own
        book, with the view's position: the next run replays the log from the first event into the new
        tables (a rebuild only empties tables, which would keep their old shape)."""
        row = curs.execute(SHARED_BOOK_SHAPE, {"schema": self.datastore.schema}).fetchone()
        if row and row["shared"]:
            tables = SQL(", ").join(self.table(name) for name in self.tables)
            curs.execute(SQL("DROP TABLE IF EXISTS {}").format(tables))
            tracking = self.table(self.tracking_table_name)
            curs.execute(
                SQL("DELETE FROM {} WHERE application_name <> %s").format(tracking),
                (self.table_migration_identifier,),
            )
        super()._create_table(curs)

    def deal_state(self, deal_id: UUID) -> DealState | None:
        with self.reading() as curs:
            return self._deals(curs, deal_id).get(deal_id)

    def _deals(self, curs: Cursor[DictRow], deal_id: UUID) -> dict[UUID, DealState]:
        """The open deals by id, with `deal_id`'s if it is open (see `page_rows`: `_keep` keeps them)."""
        return self.page_rows(curs, "deals", self._select_deals, deal_id)

    def _select_deals(self, curs: Cursor[DictRow], ids: list[UUID]) -> dict[UUID, DealState]:
        select = self.statement(
            ("deals",),
            lambda: SQL("SELECT id, deal, memo, received FROM {} WHERE id = " + ANY_ID).format(
                self.table("posting_deals")
            ),
        )
        return {
            row["id"]: DealState(Deal.from_json(row["deal"]), Decimal(row["memo"]), row["received"])
            for row in self.fetch_all(curs, select, as_json(ids))
        }

    def record(
        self,
        tracking: Tracking,
        posting: Posting | None = None,
        *,
        deal_id: UUID | None = None,
        state: DealState | None = None,
        places: list[tuple[str, str, str, datetime]] = (),
        report: tuple[Any, ...] | None = None,
    ) -> None:
        """Writes the posting, the deal's new state (None: forgotten), the names of reserves (partner,
        name, type, created) and the chain report (`projections.chain_reports`), with `tracking`."""
        with self.recording(tracking) as curs:
            if posting is not None:
                self._post(curs, tracking.notification_id, posting)
            if report is not None:
                chain_reports.append(self, curs, report)
            if deal_id is not None:
                self._keep(curs, deal_id, state)
            if places:
                curs.executemany(self.statement(("place",), self._insert_place), places)

    def _insert_place(self) -> Composed:
        return SQL("INSERT INTO {} VALUES (%s, %s, %s, %s) ON CONFLICT (partner, name) DO NOTHING").format(
            self.table("reserve_places")
        )

    def _post(self, curs: Cursor[DictRow], position: int, posting: Posting) -> None:
        """Adds the posting's entries and their totals to the batch's, written at its end (at once outside
        a batch)."""
        kept = self.kept()
        pending = kept.setdefault("postings", PendingPostings()) if kept is not None else PendingPostings()
        pending.add(position, posting, rules.balanced(posting.entries))  # never writes an unbalanced set
        self.at_batch_end(curs, "postings", self._write_postings(pending))

    def _write_postings(self, pending: PendingPostings) -> Callable[[Cursor[DictRow]], None]:
        def write(curs: Cursor[DictRow]) -> None:
            if not pending.rows:
                return
            curs.execute(self.statement(("postings",), self._insert_postings), as_json(pending.rows))
            curs.execute(
                self.statement(("balances",), self._add_to_balances), as_json(pending.balance_rows())
            )
            days = self.statement(("daily balances",), lambda: daily_balances.add_to_days(self.table))
            curs.execute(days, as_json(pending.days.rows()))

        return write

    def _insert_postings(self) -> Composed:
        return SQL(
            "INSERT INTO {} (notification_id, event, partner, transaction_code, adjustment_code,"
            " entry, account, currency_code, debit, credit, at)"
            " "
            + json_rows("bigint, text, text, text, text, integer, text, text, numeric, numeric, timestamptz")
        ).format(self.table("postings"))

    def _add_to_balances(self) -> Composed:
        return SQL(
            "INSERT INTO {b} AS b "
            + json_rows("text, text, text, numeric, numeric, numeric, timestamptz, bigint")
            + " ON CONFLICT (partner, account, currency_code) DO UPDATE"
            " SET debit = b.debit + excluded.debit, credit = b.credit + excluded.credit,"
            " balance = b.balance + excluded.balance, updated = excluded.updated,"
            " notification_id = excluded.notification_id"
        ).format(b=self.table("balances"))

    def _keep(self, curs: Cursor[DictRow], deal_id: UUID, state: DealState | None) -> None:
        deals = self._deals(curs, deal_id)
        if state is None:
            deals.pop(deal_id, None)
            forget = self.statement(
                ("forget deals",),
                lambda: SQL("DELETE FROM {} WHERE id = " + ANY_ID).format(self.table("posting_deals")),
            )
            self.forget_row(curs, "posting_deals", forget, deal_id)
            return
        deals[deal_id] = state
        row = (deal_id, state.deal.to_json(), state.memo, state.received)
        self.keep_row(
            curs, "posting_deals", self.statement(("keep deals",), self._upsert_deals), deal_id, row
        )

    def _upsert_deals(self) -> Composed:
        return SQL(
            "INSERT INTO {} " + json_rows("uuid, jsonb, numeric, boolean") + " ON CONFLICT (id) DO UPDATE"
            " SET deal = excluded.deal, memo = excluded.memo, received = excluded.received"
        ).format(self.table("posting_deals"))


class PostingsProjection(Projection[Postings]):
    name = "Postings"

    @singledispatchmethod
    def process_event(self, domain_event: Any, tracking: Tracking) -> None:
        self.view.skip(tracking)

    @process_event.register
    def _opened(self, event: Transaction.Staged | Transaction.Initiated, tracking: Tracking) -> None:
        self.view.record(tracking, deal_id=event.originator_id, state=DealState(Deal.of(event.order)))

    @process_event.register
    def _committed(self, event: Transaction.Committed, tracking: Tracking) -> None:
        state = self._state(event)
        self._post(tracking, event, state, rules.buy_committed(state.deal), keep=state)

    @process_event.register
    def _confirming(self, event: Transaction.Confirming, tracking: Tracking) -> None:
        state = self._state(event)
        if state.memo:  # a later report, still short of the confirmations required: posted already
            report = chain_reports.report_row(event, state.deal, tracking.notification_id, first_seen=False)
            self.view.record(tracking, report=report)
            return
        amount = event.payment.amount
        entries = rules.deposit_seen(state.deal.crypto, amount)
        self._post(tracking, event, state, entries, keep=DealState(state.deal, memo=amount))

    @process_event.register
    def _to_payout(self, event: Transaction.ToPayout, tracking: Tracking) -> None:
        state = self._state(event)
        entries = rules.sell_received(state.deal, state.memo)
        self._post(tracking, event, state, entries, keep=DealState(state.deal, received=True))

    @process_event.register
    def _paid_out(self, event: Transaction.PaidOut, tracking: Tracking) -> None:
        state = self._state(event)
        self._post(tracking, event, state, rules.sell_paid_out(state.deal))

    @process_event.register
    def _completed(self, event: Transaction.Completed, tracking: Tracking) -> None:
        state = self._state(event)
        deal = state.deal
        if deal.type == TransactionType.BUY:
            entries = rules.buy_completed(deal)
        else:
            received = [] if state.received else rules.sell_received(deal, state.memo)
            entries = [*received, *rules.sell_paid_out(deal)]
        self._post(tracking, event, state, entries)

    @process_event.register
    def _blocked(self, event: Transaction.Blocked, tracking: Tracking) -> None:
        state = self._state(event)
        entries = rules.sell_blocked(state.deal, state.memo, event.payment.amount)
        self._post(tracking, event, state, entries, keep=DealState(state.deal))  # kept for its resolution

    @process_event.register
    def _cancelled(self, event: Transaction.Cancelled, tracking: Tracking) -> None:
        state = self._state(event)
        entries = rules.deposit_settled(state.deal.crypto, state.memo) if state.memo else []
        late_payment_possible = state.deal.type == TransactionType.SELL
        self._post(tracking, event, state, entries, keep=state if late_payment_possible else None)

    @process_event.register
    def _paid_late(self, event: Transaction.PaidLate, tracking: Tracking) -> None:
        state = self._state(event)
        entries = rules.sell_paid_late(state.deal, state.memo, event.payment.amount)
        self._post(tracking, event, state, entries, keep=DealState(state.deal))  # kept for its refund

    @process_event.register
    def _received_accepted(self, event: Transaction.ReceivedAccepted, tracking: Tracking) -> None:
        deal = Deal.of(event.order)  # priced again on the amount received
        entries = rules.sell_accepted(deal)
        if event.to_payout:
            self._post(tracking, event, DealState(deal), entries, keep=DealState(deal, received=True))
        else:
            self._post(tracking, event, DealState(deal), [*entries, *rules.sell_paid_out(deal)])

    @process_event.register
    def _refund_started(self, event: Transaction.RefundStarted, tracking: Tracking) -> None:
        state = self._state(event)
        entries = rules.refund_started(state.deal.crypto, event.held, event.amount, event.network_fee)
        self._post(tracking, event, state, entries, keep=state)

    @process_event.register
    def _refund_not_sent(self, event: Transaction.RefundNotSent, tracking: Tracking) -> None:
        state = self._state(event)
        self._post(tracking, event, state, rules.refund_not_sent(state.deal.crypto, event.held, event.kept))

    @process_event.register
    def _refunded(self, event: Transaction.Refunded, tracking: Tracking) -> None:
        state = self._state(event)
        self._post(tracking, event, state, rules.refunded(state.deal.crypto, event.amount, event.network_fee))

    @process_event.register(Transaction.SendoutSeen)
    @process_event.register(Transaction.RefundSendoutSeen)
    def _sendout_seen(self, event: Any, tracking: Tracking) -> None:
        report = chain_reports.report_row(event, self._state(event).deal, tracking.notification_id, False)
        self.view.record(tracking, report=report)

    @process_event.register
    def _disputed(self, event: DisputedReport.Recorded, tracking: Tracking) -> None:
        self.view.record(tracking, report=chain_reports.disputed_row(event, tracking.notification_id))

    @process_event.register
    def _adjusted(self, event: ReserveAdjustment.Recorded, tracking: Tracking) -> None:
        entries = rules.adjustment(
            event.kind, event.asset_code, event.amount, event.to_reserve, event.from_reserve
        )
        posting = Posting("Recorded", event.at, entries, event.partner, adjustment_code=event.code)
        named = [(event.to_reserve, event.to_type), (event.from_reserve, event.from_type)]
        new = [(name, kind) for name, kind in named if name and name not in BUILT_IN]
        places = [(event.partner, name, kind, event.at) for name, kind in new]
        self.view.record(tracking, posting, places=places)

    def _state(self, event: Any) -> DealState:
        state = self.view.deal_state(event.originator_id)
        if state is None:
            raise LookupError(f"{type(event).__qualname__} of {event.originator_id}: unknown transaction")
        return state

    def _post(
        self,
        tracking: Tracking,
        event: Any,
        state: DealState,
        entries: list[Entry],
        keep: DealState | None = None,
    ) -> None:
        """Posts `entries` (if any) and keeps the deal's new state, or forgets it when it is final."""
        deal = state.deal
        name = type(event).__name__
        posting = Posting(name, event.at, entries, deal.partner, deal.code) if entries else None
        report = chain_reports.report_row(event, deal, tracking.notification_id, first_seen=not state.memo)
        self.view.record(tracking, posting, deal_id=event.originator_id, state=keep, report=report)
