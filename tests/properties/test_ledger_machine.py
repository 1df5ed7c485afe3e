"""The `Ledger` application as a state machine against PostgreSQL.

Rules are the use cases (register, activate, open accounts, buy, commit, sendouts, sell, deposits,
payouts, the clock, expiry); a small model predicts each outcome, refusals included. Invariants: every
transaction moves only along the allowed edges and agrees with the model, a refused command records
nothing, every quote adds up exactly, an aggregate reloaded by another `Ledger` equals the one in
memory, and the limits used are the sum of the customer's transactions that count in each window.
Each example gets its own schema, so examples never see each other's aggregates.
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any
from uuid import UUID

import psycopg
import pytest
from eventsourcing.utils import get_topic
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
from application.commands import BuyRequest, DepositReport, SellRequest, SendoutReport
from application.ledger import Ledger
from application.settings import load_settings
from application.sweeper import OverdueTransactions
from application.use_cases import UseCases
from bench.clock import FakeClock
from domain.chain_reports import DisputedReport
from domain.customer import Customer
from domain.errors import (
    ChainReportConflict,
    CustomerAlreadyExists,
    CustomerNotActive,
    DepositAddressUnknown,
    InvalidStateTransition,
    PayoutsFeatureDisabled,
    TransactionExpired,
    TransactionNotStaged,
    TrustLevelLimitExceeded,
    TrustLevelUnknown,
)
from domain.limits import PERIODS, period_key
from domain.transaction import Transaction
from domain.transaction_states import ALLOWED_TRANSITIONS, FINAL_STATUSES, Status, TransactionType

SETTINGS = load_settings()
ADDRESS_BOOK = Bip32AddressBook(SETTINGS.cryptos)
REQUIRED = SETTINGS.cryptos["BTC"].required_confirmations
START = datetime(2026, 3, 10, 12, 0, tzinfo=UTC)
NOT_NEWS = FINAL_STATUSES | {Status.TO_PAYOUT, Status.PAYOUT_CONFIRMING}
DIRECTION = {TransactionType.BUY: "buy", TransactionType.SELL: "sell"}

small_fiat_values = st.decimals(min_value=5, max_value=400, places=2)
large_fiat_values = st.decimals(min_value=400, max_value=12000, places=0)
fiat_values = st.integers(0, 4).flatmap(lambda n: large_fiat_values if n == 0 else small_fiat_values)
btc_amounts = st.integers(min_value=10_000, max_value=2_000_000).map(lambda sat: Decimal(sat).scaleb(-8))
confirmations = st.sampled_from([REQUIRED, 0, REQUIRED - 1, REQUIRED + 1])
rarely = st.sampled_from([False, False, False, True])
mostly = st.sampled_from([True, True, True, False])


@dataclass
class ModelCustomer:
    partner: str
    code: str
    trust_level: str
    active: bool


@dataclass
class ModelAccount:
    partner: str
    customer: str
    code: str
    address: str


@dataclass
class ModelTransaction:
    partner: str
    code: str
    type: TransactionType
    customer: str
    status: Status
    created: datetime
    valid_until: datetime
    limit_amount: Decimal
    crypto_amount: Decimal
    address: str  # a sell's deposit address, a buy's destination
    payment: tuple[str, int, Decimal | None] | None = None  # tx id, confirmations, amount

    @property
    def id(self) -> UUID:
        return Transaction.create_id(self.partner, self.code)


def connect(env: dict[str, str]) -> psycopg.Connection:
    return psycopg.connect(
        dbname=env["POSTGRES_DBNAME"],
        host=env["POSTGRES_HOST"],
        port=env["POSTGRES_PORT"],
        user=env["POSTGRES_USER"],
        password=env["POSTGRES_PASSWORD"],
        autocommit=True,
    )


class LedgerMachine(RuleBasedStateMachine):
    customers = Bundle("customers")
    accounts = Bundle("accounts")
    transactions = Bundle("transactions")

    def __init__(self, base_env: dict[str, str]) -> None:
        """`base_env`: the test's eventsourcing env (its `postgres_env` fixture); each example gets a schema
        of its own in that database."""
        super().__init__()
        self.base_env = base_env
        self.schema = f"{base_env['POSTGRES_SCHEMA']}_{uuid.uuid4().hex[:8]}"
        with connect(base_env) as connection:
            connection.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(self.schema)))
        env = {**base_env, "POSTGRES_SCHEMA": self.schema, "POSTGRES_PRE_PING": "no"}  # half the trips
        self.clock = FakeClock()
        self.ledger = self.new_ledger(env)
        self.use_cases = UseCases.of(self.ledger, FixedPrices(SETTINGS, self.clock), ADDRESS_BOOK)
        self.overdue = OverdueTransactions(self.ledger, self.use_cases.settlement)
        self.reader = self.new_ledger(env)  # reloads what `ledger` recorded
        self.codes = itertools.count(1)
        self.address_indexes = itertools.count(1000)
        self.model_customers: dict[str, ModelCustomer] = {}
        self.model_accounts: dict[str, list[ModelAccount]] = {}
        self.model_transactions: dict[str, ModelTransaction] = {}
        self.observed: dict[str, Status] = {}
        self.latest: dict[UUID, Any] = {}  # the aggregate each use case last returned, by id
        self.checked: dict[str, object] = {}  # what each invariant last held for

    def new_ledger(self, env: dict[str, str]) -> Ledger:
        return Ledger(SETTINGS, self.clock, env=env)

    def teardown(self) -> None:
        self.ledger.close()
        self.reader.close()
        with connect(self.base_env) as connection:
            connection.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(self.schema)))

    # --- helpers -------------------------------------------------------------------------------------

    def version(self, aggregate_id: UUID) -> int | None:
        found = self.reader.store.find(aggregate_id)
        return None if found is None else found.version

    def refused(self, error: type[Exception], action: Callable[[], object], *ids: UUID) -> None:
        """`action` raises `error` and records nothing: no new event, no aggregate changed."""
        before = (self.ledger.recorder.max_notification_id(), [self.version(i) for i in ids])
        with pytest.raises(error):
            action()
        assert (self.ledger.recorder.max_notification_id(), [self.version(i) for i in ids]) == before

    def refused_report(self, error: type[Exception], action: Callable[[], object], *ids: UUID) -> None:
        """A chain report that `action` refuses with `error`: no aggregate changed, and nothing recorded but
        the report itself, kept once as a disputed report for the reconciliation."""
        before = (self.ledger.recorder.max_notification_id(), [self.version(i) for i in ids])
        with pytest.raises(error):
            action()
        assert [self.version(i) for i in ids] == before[1]
        self.kept_as_disputed(before[0])

    def kept_as_disputed(self, before: int | None) -> None:
        """Since `before`, nothing recorded but a disputed chain report (none when it was kept already)."""
        new = self.ledger.recorder.select_notifications((before or 0) + 1, 10)
        assert [n.topic for n in new] in ([], [get_topic(DisputedReport.Recorded)])

    def used(self, customer: str, direction: str, period: str) -> Decimal:
        key = period_key(period, self.clock.now())
        return sum(
            (
                t.limit_amount
                for t in self.model_transactions.values()
                if t.customer == customer
                and DIRECTION[t.type] == direction
                and t.status != Status.CANCELLED
                and period_key(period, t.created) == key
            ),
            Decimal(0),
        )

    def over_limit(self, customer: ModelCustomer, direction: str, amount: Decimal) -> bool:
        level = SETTINGS.trust_levels[customer.trust_level]
        return any(
            self.used(customer.code, direction, period) + amount > level.limit(direction, period)
            for period in PERIODS
        )

    def created(self, transaction: Transaction, customer: str, limit_amount: Decimal) -> str:
        order = transaction.order
        method = SETTINGS.payment_methods[order.payment_method]
        now = self.clock.now()
        assert (transaction.created, transaction.valid_until) == (
            now,
            now + timedelta(minutes=method.validity_minutes),
        )
        assert order.limit_amount == limit_amount
        self.model_transactions[transaction.code] = ModelTransaction(
            partner=order.partner,
            code=transaction.code,
            type=TransactionType(order.type),
            customer=customer,
            status=transaction.status,
            created=now,
            valid_until=transaction.valid_until,
            limit_amount=order.limit_amount,
            crypto_amount=order.quote.crypto_amount,
            address=order.destination_address,
        )
        self.latest[transaction.id] = transaction
        return transaction.code

    def moved(self, model: ModelTransaction, transaction: Transaction, status: Status) -> None:
        assert transaction.status == status
        model.status = status
        self.latest[transaction.id] = transaction

    # --- customers and accounts ----------------------------------------------------------------------

    @initialize(target=accounts, trust_level=st.sampled_from(["Basic", "Plus"]), active=mostly)
    def a_customer_of_demo_with_an_account(self, trust_level: str, active: bool) -> ModelAccount:
        return self.open_account(self.register("demo", trust_level, active))

    @initialize(target=accounts, trust_level=st.sampled_from(["Basic", "Plus"]), active=mostly)
    def a_customer_of_other_with_an_account(self, trust_level: str, active: bool) -> ModelAccount:
        return self.open_account(self.register("other", trust_level, active))

    @rule(
        target=customers,
        partner=st.sampled_from(["demo", "other"]),
        trust_level=st.sampled_from(["Basic", "Plus"]),
        active=mostly,
    )
    def register(self, partner: str, trust_level: str, active: bool) -> str:
        code = f"C{next(self.codes)}"
        status = "ACTIVE" if active else None
        customer = self.use_cases.customers.register_customer(partner, code, trust_level, status=status)
        assert (customer.status, customer.trust_level) == ("ACTIVE" if active else "NEW", trust_level)
        self.model_customers[code] = ModelCustomer(partner, code, trust_level, active)
        self.latest[customer.id] = customer
        return code

    @rule(code=customers, trust_level=st.sampled_from(["Basic", "Gold"]))
    def register_again(self, code: str, trust_level: str) -> None:
        customer = self.model_customers[code]
        error = CustomerAlreadyExists if trust_level in SETTINGS.trust_levels else TrustLevelUnknown
        self.refused(
            error,
            lambda: self.use_cases.customers.register_customer(customer.partner, code, trust_level),
            Customer.create_id(customer.partner, code),
        )

    @rule(code=customers)
    def activate(self, code: str) -> None:
        customer = self.model_customers[code]
        before = self.ledger.recorder.max_notification_id()
        activated = self.use_cases.customers.activate_customer(customer.partner, code, "ACTIVE")
        assert activated.status == "ACTIVE"
        if customer.active:
            assert self.ledger.recorder.max_notification_id() == before
        customer.active = True
        self.latest[activated.id] = activated

    @rule(target=accounts, code=customers, again=rarely)
    def open_account(self, code: str, again: bool = False) -> Any:
        customer = self.model_customers[code]
        if again and self.model_accounts.get(code):
            return self.open_account_again(self.model_accounts[code][0])
        address = ADDRESS_BOOK.derive("BTC", next(self.address_indexes)).address
        account, created = self.use_cases.customers.open_account(customer.partner, code, address)
        assert created
        assert (account.crypto, account.customer_address) == ("BTC", address)
        self.latest[account.id] = account
        linked = self.ledger.store.customer(customer.partner, code)
        assert account.code in linked.account_codes
        self.latest[linked.id] = linked
        opened = ModelAccount(customer.partner, code, account.code, address)
        self.model_accounts.setdefault(code, []).append(opened)
        return opened

    def open_account_again(self, account: ModelAccount) -> Any:
        """The same address again names the same account, and records nothing."""
        before = self.ledger.recorder.max_notification_id()
        again, created = self.use_cases.customers.open_account(
            account.partner, account.customer, account.address
        )
        assert (again.code, created) == (account.code, False)
        assert self.ledger.recorder.max_notification_id() == before
        return multiple()

    # --- buys ----------------------------------------------------------------------------------------

    @rule(
        target=transactions,
        account=accounts,
        fiat_value=fiat_values,
        method=st.sampled_from(["BANK_EUR_BUY", "CARD_EUR_BUY", "BANK_USD_BUY"]),
        stage=mostly,
    )
    def create_buy(self, account: ModelAccount, fiat_value: Decimal, method: str, stage: bool) -> Any:
        customer = self.model_customers[account.customer]
        request = BuyRequest(
            customer_code=account.customer,
            currency=SETTINGS.payment_methods[method].currency,
            crypto="BTC",
            fiat_value=fiat_value,
            destination_address=account.address,
            payment_method=method,
        )
        create = lambda: self.use_cases.buys.create(account.partner, request, stage)  # noqa: E731
        simulate = lambda: self.use_cases.buys.simulate(account.partner, request)  # noqa: E731
        priced = self.use_cases.desk.buy_order(account.partner, "priced", request, None)
        if not customer.active:
            self.refused(CustomerNotActive, simulate)  # a simulate refuses what its create would
            self.refused(CustomerNotActive, create)
            return multiple()
        if self.over_limit(customer, "buy", priced.limit_amount):
            self.refused(TrustLevelLimitExceeded, simulate)
            self.refused(TrustLevelLimitExceeded, create)
            return multiple()
        simulated = simulate()
        transaction = create()
        assert transaction.status == (Status.STAGED if stage else Status.SENDING)
        assert transaction.order.quote == simulated.quote
        return self.created(transaction, account.customer, simulated.limit_amount)

    @rule(code=transactions)
    def commit(self, code: str) -> None:
        model = self.model_transactions[code]
        commit = lambda: self.use_cases.buys.commit(model.partner, code)  # noqa: E731
        if model.status != Status.STAGED:
            self.refused(TransactionNotStaged, commit, model.id)
        elif self.clock.now() > model.valid_until:
            with pytest.raises(TransactionExpired):
                commit()
            model.status = Status.CANCELLED
            self.latest.pop(model.id, None)
        else:
            self.moved(model, commit(), Status.SENDING)

    @rule(code=transactions, confirmations=confirmations, other_tx=rarely)
    def report_sendout(self, code: str, confirmations: int, other_tx: bool) -> None:
        model = self.model_transactions[code]
        tx_id = f"sendout-{code}" + ("-other" if other_tx else "")
        report = lambda: self.use_cases.settlement.report_sendout(  # noqa: E731
            model.partner, SendoutReport(code, tx_id, confirmations)
        )
        if model.type == TransactionType.SELL:
            return self.refused_report(InvalidStateTransition, report, model.id)
        if model.payment is not None:
            if tx_id != model.payment[0]:
                return self.refused_report(ChainReportConflict, report, model.id)
            if confirmations <= model.payment[1] or model.status in NOT_NEWS:
                return self.unchanged(report, model)
        if model.status != Status.SENDING:
            return self.refused_report(InvalidStateTransition, report, model.id)
        model.payment = (tx_id, confirmations, None)
        self.moved(model, report(), Status.COMPLETED if confirmations >= REQUIRED else Status.SENDING)

    def unchanged(self, action: Callable[[], Transaction], model: ModelTransaction) -> None:
        """A report that is no news: answered with the transaction as it was, nothing recorded."""
        before = self.ledger.recorder.max_notification_id()
        assert action().version == self.version(model.id)
        self.kept_as_disputed(before)  # fewer confirmations than recorded: kept as a disputed report

    # --- sells ---------------------------------------------------------------------------------------

    @rule(
        target=transactions,
        account=accounts,
        by_crypto=st.booleans(),
        crypto_amount=btc_amounts,
        fiat_value=fiat_values,
    )
    def create_sell(
        self, account: ModelAccount, by_crypto: bool, crypto_amount: Decimal, fiat_value: Decimal
    ) -> Any:
        customer = self.model_customers[account.customer]
        request = SellRequest(
            customer_code=account.customer,
            account_code=account.code,
            currency="EUR",
            crypto="BTC",
            payment_method="BANK_EUR_SELL",
            crypto_amount=crypto_amount if by_crypto else None,
            fiat_value=None if by_crypto else fiat_value,
        )
        create = lambda: self.use_cases.sells.create(account.partner, request)  # noqa: E731
        simulate = lambda: self.use_cases.sells.simulate(account.partner, request)  # noqa: E731
        priced = self.use_cases.desk.sell_order(account.partner, "priced", request, None)
        if not customer.active:
            self.refused(CustomerNotActive, simulate)  # a simulate refuses what its create would
            self.refused(CustomerNotActive, create)
            return multiple()
        if self.over_limit(customer, "sell", priced.limit_amount):
            self.refused(TrustLevelLimitExceeded, simulate)
            self.refused(TrustLevelLimitExceeded, create)
            return multiple()
        simulated = simulate()
        transaction = create()
        assert transaction.status == Status.INITIATED
        assert transaction.order.quote == simulated.quote
        assert transaction.order.destination_address not in {
            t.address for t in self.model_transactions.values()
        }
        return self.created(transaction, account.customer, simulated.limit_amount)

    @rule(
        code=transactions,
        right_amount=mostly,
        confirmations=confirmations,
        other_tx=rarely,
        other_partner=rarely,
    )
    def report_deposit(
        self, code: str, right_amount: bool, confirmations: int, other_tx: bool, other_partner: bool
    ) -> None:
        model = self.model_transactions[code]
        amount = model.crypto_amount + (0 if right_amount else Decimal("0.00000001"))
        tx_id = f"deposit-{code}" + ("-other" if other_tx else "")
        partner = {"demo": "other", "other": "demo"}[model.partner] if other_partner else model.partner
        deposit = DepositReport("BTC", model.address, tx_id, amount, confirmations)
        report = lambda: self.use_cases.settlement.report_deposit(partner, deposit)  # noqa: E731
        if model.type == TransactionType.BUY or other_partner:
            return self.refused_report(DepositAddressUnknown, report, model.id)
        if model.payment is not None:
            if tx_id != model.payment[0] or amount != model.payment[2]:
                return self.refused_report(ChainReportConflict, report, model.id)
            if confirmations <= model.payment[1] or model.status in NOT_NEWS:
                return self.unchanged(report, model)
        overdue = model.status == Status.INITIATED and self.clock.now() > model.valid_until
        if model.status == Status.CANCELLED or overdue:  # first seen after validUntil: late, to refund
            model.payment = (tx_id, confirmations, amount)
            return self.moved(model, report(), Status.CANCELLED)
        if model.status not in (Status.INITIATED, Status.CONFIRMING):
            return self.refused_report(InvalidStateTransition, report, model.id)
        if not right_amount:
            status = Status.BLOCKED
        elif confirmations < REQUIRED:
            status = Status.CONFIRMING
        elif SETTINGS.partners[model.partner].has_payouts:
            status = Status.TO_PAYOUT
        else:
            status = Status.COMPLETED
        model.payment = (tx_id, confirmations, amount)
        self.moved(model, report(), status)

    @rule(code=transactions, complete=st.booleans())
    def payout(self, code: str, complete: bool) -> None:
        model = self.model_transactions[code]
        if complete:
            sources, target = (Status.TO_PAYOUT, Status.PAYOUT_CONFIRMING), Status.COMPLETED
            action = lambda: self.use_cases.settlement.pay_out(model.partner, code, "REF")  # noqa: E731
        else:
            sources, target = (Status.TO_PAYOUT,), Status.PAYOUT_CONFIRMING
            action = lambda: self.use_cases.settlement.confirm_payout(model.partner, code, "REF")  # noqa: E731
        if model.type == TransactionType.BUY:
            self.refused(InvalidStateTransition, action, model.id)
        elif not SETTINGS.partners[model.partner].has_payouts:
            self.refused(PayoutsFeatureDisabled, action, model.id)
        elif model.status not in sources:
            self.refused(InvalidStateTransition, action, model.id)
        else:
            self.moved(model, action(), target)

    @rule(code=transactions)
    def drive(self, code: str) -> None:
        """The next command on the way to completion, so that examples reach the later states."""
        status = self.model_transactions[code].status
        if status == Status.STAGED:
            self.commit(code)
        elif status == Status.SENDING:
            self.report_sendout(code, REQUIRED, other_tx=False)
        elif status in (Status.INITIATED, Status.CONFIRMING):
            self.report_deposit(code, True, REQUIRED, other_tx=False, other_partner=False)
        else:
            self.payout(code, complete=status == Status.PAYOUT_CONFIRMING)

    # --- time ----------------------------------------------------------------------------------------

    @precondition(lambda self: self.model_transactions)
    @rule(minutes=st.sampled_from([1, 14, 15, 16, 29, 30, 31, 240, 1440]), sweep=st.booleans())
    def advance_clock(self, minutes: int, sweep: bool) -> None:
        """Time passes; then, maybe, the sweep cancels what is overdue (exactly that, and once)."""
        self.clock.at += timedelta(minutes=minutes)
        if not sweep:
            return
        now = self.clock.now()
        overdue = {
            code
            for code, t in self.model_transactions.items()
            if t.status in (Status.STAGED, Status.INITIATED) and now > t.valid_until
        }
        assert set(self.overdue.expire_overdue()) == overdue
        for code in overdue:
            self.model_transactions[code].status = Status.CANCELLED
            self.latest.pop(self.model_transactions[code].id, None)
        assert self.overdue.expire_overdue() == []

    # --- invariants ----------------------------------------------------------------------------------

    def changed_since_checked(self, invariant: str) -> bool:
        """Whether anything was recorded, modelled or timed since `invariant` last held. A step that
        did none of that (most refusals) cannot have broken it, so it is not checked again."""
        state = (
            self.ledger.recorder.max_notification_id(),
            self.clock.now(),
            [(code, t.status, t.payment) for code, t in self.model_transactions.items()],
            [(code, c.active) for code, c in self.model_customers.items()],
            [(key, id(aggregate)) for key, aggregate in self.latest.items()],
        )
        if self.checked.get(invariant) == state:
            return False
        self.checked[invariant] = state
        return True

    @invariant()
    def transactions_move_only_along_allowed_edges_and_their_quotes_add_up(self) -> None:
        if not self.changed_since_checked("transactions"):
            return
        for code, model in self.model_transactions.items():
            stored = self.reader.store.transaction(model.partner, code)
            assert stored.status == model.status, code
            before = self.observed.get(code)
            if before is not None and before != stored.status:
                assert (before, stored.status) in ALLOWED_TRANSITIONS[model.type], (code, before)
            self.observed[code] = stored.status
            quote = stored.order.quote
            assert quote.crypto_amount > 0
            if model.type == TransactionType.BUY:
                assert quote.fiat_value == quote.crypto_value + quote.fees.total_fiat, code
            else:
                assert quote.crypto_value == quote.fiat_value + quote.fees.total_fiat, code

    @invariant()
    def reloaded_aggregates_equal_the_ones_in_memory(self) -> None:
        if not self.changed_since_checked("reloaded"):
            return
        for aggregate_id, aggregate in self.latest.items():
            assert self.reader.repository.get(aggregate_id).__dict__ == aggregate.__dict__

    @invariant()
    def limits_used_are_the_transactions_that_count_today_and_this_month(self) -> None:
        if not self.changed_since_checked("limits"):
            return
        for code, customer in self.model_customers.items():
            for usage in self.use_cases.limits.usage(customer.partner, code):
                assert usage.used == self.used(code, usage.direction, usage.period), (code, usage)
                assert usage.key == period_key(usage.period, self.clock.now())


def test_the_ledger_behaves_like_its_model(postgres_env: dict[str, str]) -> None:
    # the machine gets the fixture from a factory closing over it (Hypothesis's pattern for pytest fixtures)
    run_state_machine_as_test(
        lambda: LedgerMachine(postgres_env),
        settings=settings(
            max_examples=15,
            stateful_step_count=30,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow],
        ),
    )
