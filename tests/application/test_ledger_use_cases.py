"""The ledger's use cases end to end against PostgreSQL: customers, accounts, buys, sells, chain reports,
payouts, expiry and trust-level limits, each with its allowed and its refused side."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest

from application.commands import BuyRequest, DepositReport, SellRequest, SendoutReport
from application.sweeper import OverdueTransactions
from application.use_cases import UseCases
from domain.errors import (
    CryptoAddressInvalid,
    CustomerAlreadyExists,
    CustomerNotActive,
    CustomerNotFound,
    DepositAddressUnknown,
    InvalidStateTransition,
    PayoutsFeatureDisabled,
    TransactionExpired,
    TransactionNotFound,
    TransactionNotStaged,
    TrustLevelLimitExceeded,
    TrustLevelUnknown,
)
from domain.transaction import Status, Transaction
from tests.application.conftest import open_btc_account, register_active

BTC_CONFIRMED = 2  # required_confirmations of BTC in the demo settings


def buy(
    use_cases: UseCases,
    partner: str,
    customer: str,
    address: str,
    fiat_value: str,
    stage: bool = True,
    method: str = "BANK_EUR_BUY",
    currency: str = "EUR",
) -> Transaction:
    request = BuyRequest(
        customer_code=customer,
        currency=currency,
        crypto="BTC",
        fiat_value=Decimal(fiat_value),
        destination_address=address,
        payment_method=method,
    )
    return use_cases.buys.create(partner, request, stage=stage)


def sell(
    use_cases: UseCases,
    partner: str,
    customer: str,
    account_code: str,
    crypto_amount: str | None = None,
    fiat_value: str | None = None,
) -> Transaction:
    request = SellRequest(
        customer_code=customer,
        account_code=account_code,
        currency="EUR",
        crypto="BTC",
        payment_method="BANK_EUR_SELL",
        crypto_amount=None if crypto_amount is None else Decimal(crypto_amount),
        fiat_value=None if fiat_value is None else Decimal(fiat_value),
    )
    return use_cases.sells.create(partner, request)


def deposit(
    use_cases: UseCases, partner: str, sold: Transaction, confirmations: int, amount: Decimal | None = None
) -> Transaction:
    report = DepositReport(
        crypto="BTC",
        address=sold.order.destination_address,
        tx_id=f"deposit-{sold.code}",
        crypto_amount=sold.order.quote.crypto_amount if amount is None else amount,
        confirmations=confirmations,
    )
    return use_cases.settlement.report_deposit(partner, report)


def used(use_cases: UseCases, partner: str, customer: str, direction: str, period: str = "daily") -> Decimal:
    [usage] = [
        u
        for u in use_cases.limits.usage(partner, customer)
        if u.direction == direction and u.period == period
    ]
    return usage.used


# --- customers ---------------------------------------------------------------------------------------


def test_a_customer_is_registered_new_and_activated_once(use_cases):
    customer = use_cases.customers.register_customer("demo", "alice", "Basic")
    assert customer.status == "NEW"
    activated = use_cases.customers.activate_customer("demo", "alice", "ACTIVE")
    assert activated.status == "ACTIVE"
    again = use_cases.customers.activate_customer("demo", "alice", "ACTIVE")
    assert again.version == activated.version


def test_registering_the_same_customer_code_twice_is_refused(ledger, use_cases):
    register_active(use_cases, "demo", "alice")
    with pytest.raises(CustomerAlreadyExists):
        use_cases.customers.register_customer("demo", "alice", "Plus")
    assert ledger.store.customer("demo", "alice").trust_level == "Basic"


def test_an_unknown_trust_level_is_refused_and_nothing_is_registered(ledger, use_cases):
    with pytest.raises(TrustLevelUnknown):
        use_cases.customers.register_customer("demo", "alice", "Platinum")
    with pytest.raises(CustomerNotFound):
        ledger.store.customer("demo", "alice")


def test_another_partner_registers_the_same_code_and_neither_sees_the_others_customer(ledger, use_cases):
    use_cases.customers.register_customer("demo", "alice", "Basic")
    use_cases.customers.register_customer("other", "bob", "Plus")
    theirs = use_cases.customers.register_customer("other", "alice", "Plus")
    assert theirs.id != ledger.store.customer("demo", "alice").id
    assert ledger.store.customer("other", "alice").trust_level == "Plus"
    with pytest.raises(CustomerNotFound):
        ledger.store.customer("demo", "bob")
    with pytest.raises(CustomerNotFound):
        use_cases.customers.activate_customer("demo", "bob", "ACTIVE")
    with pytest.raises(CustomerNotFound):
        use_cases.limits.usage("other", "nobody")


def test_a_new_customer_can_neither_buy_nor_sell(use_cases, addresses):
    use_cases.customers.register_customer("demo", "alice", "Basic")
    address = addresses.next()
    account = open_btc_account(use_cases, "demo", "alice", address)
    with pytest.raises(CustomerNotActive):
        buy(use_cases, "demo", "alice", address, "100")
    with pytest.raises(CustomerNotActive):
        sell(use_cases, "demo", "alice", account.code, crypto_amount="0.001")
    assert used(use_cases, "demo", "alice", "buy") == 0
    use_cases.customers.activate_customer("demo", "alice", "ACTIVE")
    assert buy(use_cases, "demo", "alice", address, "100").status == Status.STAGED


# --- accounts ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("crypto", ["BTC", "ETH", "LTC"])
def test_the_crypto_of_an_account_is_detected_from_the_customers_address(
    ledger, use_cases, addresses, crypto
):
    register_active(use_cases, "demo", "alice")
    customer_address = addresses.next(crypto)
    account, created = use_cases.customers.open_account("demo", "alice", customer_address)
    assert created
    assert account.crypto == crypto
    assert account.customer_address == customer_address
    assert use_cases.context.addresses.is_valid(crypto, account.deposit_address)
    assert account.deposit_path.startswith(ledger.settings.cryptos[crypto].derivation_path + "/0/")
    assert account.code in ledger.store.customer("demo", "alice").account_codes


def test_opening_an_account_for_the_same_address_again_returns_the_existing_account(
    ledger, use_cases, addresses
):
    register_active(use_cases, "demo", "alice")
    customer_address = addresses.next()
    first, created_first = use_cases.customers.open_account("demo", "alice", customer_address)
    again, created_again = use_cases.customers.open_account("demo", "alice", customer_address, "BTC")
    assert (created_first, created_again) == (True, False)
    assert again.code == first.code
    assert again.deposit_address == first.deposit_address
    assert again.version == first.version
    assert ledger.store.customer("demo", "alice").account_codes == [first.code]


@pytest.mark.parametrize(
    ("address", "crypto"),
    [
        ("bc1qcr8te4kr609gcawutmrza0j4xv80jy8z306fyv", None),  # checksum off by one character
        ("not an address", None),
        ("0x9858EfFD232B4033E47d90003D41EC34EcaEda94", "BTC"),  # an ETH address named as BTC
    ],
)
def test_an_invalid_customer_address_is_refused(ledger, use_cases, address, crypto):
    register_active(use_cases, "demo", "alice")
    with pytest.raises(CryptoAddressInvalid):
        use_cases.customers.open_account("demo", "alice", address, crypto)
    assert ledger.store.customer("demo", "alice").account_codes == []


# --- buys --------------------------------------------------------------------------------------------


def test_a_staged_buy_is_committed_and_completes_once_its_sendout_is_confirmed(use_cases, addresses):
    register_active(use_cases, "demo", "alice")
    address = addresses.next()
    account = open_btc_account(use_cases, "demo", "alice", address)
    staged = buy(use_cases, "demo", "alice", address, "250.00")
    assert staged.status == Status.STAGED
    assert staged.order.account_code == account.code
    assert staged.order.destination_address == address
    quote = staged.order.quote
    assert quote.fiat_value == quote.crypto_value + quote.fees.total_fiat == Decimal("250.00")

    assert use_cases.buys.commit("demo", staged.code).status == Status.SENDING
    seen = use_cases.settlement.report_sendout(
        "demo", SendoutReport(staged.code, "sendout-1", BTC_CONFIRMED - 1)
    )
    assert seen.status == Status.SENDING
    assert seen.payment.confirmations == BTC_CONFIRMED - 1
    done = use_cases.settlement.report_sendout("demo", SendoutReport(staged.code, "sendout-1", BTC_CONFIRMED))
    assert done.status == Status.COMPLETED
    repeated = use_cases.settlement.report_sendout(
        "demo", SendoutReport(staged.code, "sendout-1", BTC_CONFIRMED + 3)
    )
    assert repeated.version == done.version


def test_another_partner_can_neither_see_nor_move_a_transaction(ledger, use_cases, addresses):
    register_active(use_cases, "demo", "alice")
    register_active(use_cases, "other", "alice")
    address = addresses.next()
    open_btc_account(use_cases, "demo", "alice", address)
    staged = buy(use_cases, "demo", "alice", address, "100")
    with pytest.raises(TransactionNotFound):
        ledger.store.transaction("other", staged.code)
    with pytest.raises(TransactionNotFound):
        use_cases.buys.commit("other", staged.code)
    with pytest.raises(TransactionNotFound):
        use_cases.settlement.report_sendout("other", SendoutReport(staged.code, "sendout-1", 1))
    assert ledger.store.transaction("demo", staged.code).version == staged.version


def test_a_buy_created_without_stage_is_sending(use_cases, addresses):
    register_active(use_cases, "demo", "alice")
    address = addresses.next()
    open_btc_account(use_cases, "demo", "alice", address)
    assert buy(use_cases, "demo", "alice", address, "100", stage=False).status == Status.SENDING


def test_creating_a_transaction_again_with_its_code_returns_the_first_and_reserves_once(use_cases, addresses):
    register_active(use_cases, "demo", "alice")
    address = addresses.next()
    account = open_btc_account(use_cases, "demo", "alice", address)
    request = BuyRequest("alice", "EUR", "BTC", Decimal("300"), address, "BANK_EUR_BUY")
    first = use_cases.buys.create("demo", request, stage=True, code="TX-RETRIED-BUY")
    again = use_cases.buys.create("demo", request, stage=True, code="TX-RETRIED-BUY")
    assert (again.code, again.version) == (first.code, first.version)
    sale = SellRequest("alice", account.code, "EUR", "BTC", "BANK_EUR_SELL", fiat_value=Decimal("200"))
    sold = use_cases.sells.create("demo", sale, code="TX-RETRIED-SELL")
    assert use_cases.sells.create("demo", sale, code="TX-RETRIED-SELL").order == sold.order
    assert used(use_cases, "demo", "alice", "buy") == Decimal("300")
    assert used(use_cases, "demo", "alice", "sell") == Decimal("200")


def test_only_a_staged_buy_can_be_committed(ledger, use_cases, addresses):
    register_active(use_cases, "demo", "alice")
    address = addresses.next()
    account = open_btc_account(use_cases, "demo", "alice", address)
    sending = buy(use_cases, "demo", "alice", address, "100", stage=False)
    sold = sell(use_cases, "demo", "alice", account.code, crypto_amount="0.001")
    for code in (sending.code, sold.code):
        with pytest.raises(TransactionNotStaged):
            use_cases.buys.commit("demo", code)
    assert ledger.store.transaction("demo", sending.code).version == sending.version
    assert ledger.store.transaction("demo", sold.code).version == sold.version


def test_a_staged_buy_committed_after_valid_until_is_cancelled_and_its_limit_released(
    ledger, use_cases, addresses, clock
):
    register_active(use_cases, "demo", "alice")
    address = addresses.next()
    open_btc_account(use_cases, "demo", "alice", address)
    staged = buy(use_cases, "demo", "alice", address, "400")
    assert used(use_cases, "demo", "alice", "buy") == Decimal("400")
    clock.set(staged.valid_until)
    clock.advance(seconds=1)
    with pytest.raises(TransactionExpired):
        use_cases.buys.commit("demo", staged.code)
    cancelled = ledger.store.transaction("demo", staged.code)
    assert cancelled.status == Status.CANCELLED
    assert cancelled.cancel_reason == "expired"
    assert used(use_cases, "demo", "alice", "buy") == 0
    assert used(use_cases, "demo", "alice", "buy", "monthly") == 0
    with pytest.raises(TransactionNotStaged):
        use_cases.buys.commit("demo", staged.code)


def test_a_staged_buy_can_still_be_committed_at_its_valid_until(use_cases, addresses, clock):
    register_active(use_cases, "demo", "alice")
    address = addresses.next()
    open_btc_account(use_cases, "demo", "alice", address)
    staged = buy(use_cases, "demo", "alice", address, "100", method="CARD_EUR_BUY")
    assert staged.valid_until - staged.created == timedelta(minutes=15)
    clock.set(staged.valid_until)
    assert use_cases.buys.commit("demo", staged.code).status == Status.SENDING


def test_expire_overdue_cancels_overdue_staged_buys_and_unpaid_sells_but_not_committed_ones(
    ledger, use_cases, addresses, clock
):
    register_active(use_cases, "demo", "alice", "Plus")
    address = addresses.next()
    account = open_btc_account(use_cases, "demo", "alice", address)
    staged = buy(use_cases, "demo", "alice", address, "100")
    staged_card = buy(use_cases, "demo", "alice", address, "100", method="CARD_EUR_BUY")  # 15 minutes
    committed = buy(use_cases, "demo", "alice", address, "100")
    use_cases.buys.commit("demo", committed.code)
    sending = buy(use_cases, "demo", "alice", address, "100", stage=False)
    unpaid = sell(use_cases, "demo", "alice", account.code, crypto_amount="0.002")
    paid = sell(use_cases, "demo", "alice", account.code, crypto_amount="0.003")
    deposit(use_cases, "demo", paid, confirmations=0)
    assert used(use_cases, "demo", "alice", "buy") == Decimal("400")

    overdue = OverdueTransactions(ledger, use_cases.settlement)
    clock.advance(minutes=16)
    assert overdue.expire_overdue() == [staged_card.code]
    clock.advance(minutes=15)
    assert sorted(overdue.expire_overdue()) == sorted([staged.code, unpaid.code])
    assert overdue.expire_overdue() == []

    statuses = {code: ledger.store.transaction("demo", code).status for code in (
        staged.code, staged_card.code, committed.code, sending.code, unpaid.code, paid.code
    )}  # fmt: skip
    assert statuses == {
        staged.code: Status.CANCELLED,
        staged_card.code: Status.CANCELLED,
        committed.code: Status.SENDING,
        sending.code: Status.SENDING,
        unpaid.code: Status.CANCELLED,
        paid.code: Status.CONFIRMING,
    }
    assert used(use_cases, "demo", "alice", "buy") == Decimal("200")
    assert used(use_cases, "demo", "alice", "sell") == paid.order.limit_amount


def test_a_new_ledger_instance_sweeps_what_another_one_opened(
    make_use_cases, ledger, use_cases, addresses, clock
):
    register_active(use_cases, "demo", "alice")
    address = addresses.next()
    open_btc_account(use_cases, "demo", "alice", address)
    staged = buy(use_cases, "demo", "alice", address, "100")
    others = [buy(use_cases, "demo", "alice", address, "10", stage=i == 1) for i in range(3)]
    clock.advance(minutes=31)
    fresh = make_use_cases()
    swept = OverdueTransactions(fresh.ledger, fresh.settlement).expire_overdue(
        batch=2
    )  # two openings at a time
    assert sorted(swept) == sorted([staged.code, others[1].code])
    assert OverdueTransactions(ledger, use_cases.settlement).expire_overdue() == []


# --- sells -------------------------------------------------------------------------------------------


def test_a_sell_by_crypto_amount_is_paid_confirmed_and_paid_out_with_payouts(use_cases, addresses):
    register_active(use_cases, "demo", "alice")
    account = open_btc_account(use_cases, "demo", "alice", addresses.next())
    sold = sell(use_cases, "demo", "alice", account.code, crypto_amount="0.01")
    assert sold.status == Status.INITIATED
    quote = sold.order.quote
    assert quote.crypto_amount == Decimal("0.01")
    assert quote.crypto_value == quote.fiat_value + quote.fees.total_fiat == Decimal("590.00")

    assert deposit(use_cases, "demo", sold, BTC_CONFIRMED - 1).status == Status.CONFIRMING
    assert deposit(use_cases, "demo", sold, BTC_CONFIRMED).status == Status.TO_PAYOUT
    confirming = use_cases.settlement.confirm_payout("demo", sold.code, reference="PAY-1")
    assert confirming.status == Status.PAYOUT_CONFIRMING
    paid = use_cases.settlement.pay_out("demo", sold.code, bank_account="DE00")
    assert paid.status == Status.COMPLETED
    assert (paid.payout_reference, paid.customer_bank_account_id) == ("PAY-1", "DE00")
    with pytest.raises(InvalidStateTransition):
        use_cases.settlement.pay_out("demo", sold.code)


def test_a_sell_by_fiat_value_pays_out_exactly_that_value(use_cases, addresses):
    register_active(use_cases, "demo", "alice")
    account = open_btc_account(use_cases, "demo", "alice", addresses.next())
    sold = sell(use_cases, "demo", "alice", account.code, fiat_value="300.00")
    quote = sold.order.quote
    assert quote.fiat_value == Decimal("300.00")
    assert quote.crypto_value == quote.fiat_value + quote.fees.total_fiat
    assert sold.order.limit_amount == Decimal("300.00")
    with pytest.raises(InvalidStateTransition):
        use_cases.settlement.confirm_payout("demo", sold.code)
    assert deposit(use_cases, "demo", sold, BTC_CONFIRMED).status == Status.TO_PAYOUT
    assert use_cases.settlement.pay_out("demo", sold.code).status == Status.COMPLETED


def test_a_confirmed_sell_of_a_partner_without_payouts_completes_at_once(ledger, use_cases, addresses):
    register_active(use_cases, "other", "alice")
    account = open_btc_account(use_cases, "other", "alice", addresses.next())
    sold = sell(use_cases, "other", "alice", account.code, fiat_value="200")
    assert deposit(use_cases, "other", sold, BTC_CONFIRMED - 1).status == Status.CONFIRMING
    done = deposit(use_cases, "other", sold, BTC_CONFIRMED)
    assert done.status == Status.COMPLETED
    for payout in (use_cases.settlement.confirm_payout, use_cases.settlement.pay_out):
        with pytest.raises(PayoutsFeatureDisabled):
            payout("other", sold.code)
    assert ledger.store.transaction("other", sold.code).version == done.version


def test_a_deposit_of_another_amount_blocks_the_sell(use_cases, addresses):
    register_active(use_cases, "demo", "alice")
    account = open_btc_account(use_cases, "demo", "alice", addresses.next())
    sold = sell(use_cases, "demo", "alice", account.code, crypto_amount="0.01")
    blocked = deposit(use_cases, "demo", sold, BTC_CONFIRMED, amount=Decimal("0.00999999"))
    assert blocked.status == Status.BLOCKED
    assert blocked.payment.amount == Decimal("0.00999999")
    with pytest.raises(InvalidStateTransition):
        use_cases.settlement.pay_out("demo", sold.code)


def test_a_deposit_to_an_address_that_is_no_sells_of_this_partner_is_refused(ledger, use_cases, addresses):
    register_active(use_cases, "demo", "alice")
    register_active(use_cases, "other", "bob")
    account = open_btc_account(use_cases, "demo", "alice", addresses.next())
    sold = sell(use_cases, "demo", "alice", account.code, crypto_amount="0.01")
    amount = sold.order.quote.crypto_amount
    for partner, address in [
        ("demo", addresses.next()),  # nobody's deposit address
        ("demo", account.deposit_address),  # an account's, not a sell's
        ("other", sold.order.destination_address),  # another partner's sell
    ]:
        with pytest.raises(DepositAddressUnknown):
            use_cases.settlement.report_deposit(
                partner, DepositReport("BTC", address, "tx-1", amount, BTC_CONFIRMED)
            )
    assert ledger.store.transaction("demo", sold.code).version == sold.version


def test_each_sell_gets_its_own_deposit_address(use_cases, addresses):
    register_active(use_cases, "demo", "alice", "Plus")
    account = open_btc_account(use_cases, "demo", "alice", addresses.next())
    sells = [sell(use_cases, "demo", "alice", account.code, fiat_value="50") for _ in range(4)]
    deposit_addresses = {s.order.destination_address for s in sells} | {account.deposit_address}
    paths = {s.order.deposit_path for s in sells} | {account.deposit_path}
    assert len(deposit_addresses) == len(paths) == 5
    assert all(use_cases.context.addresses.is_valid("BTC", a) for a in deposit_addresses)


# --- limits ------------------------------------------------------------------------------------------


def test_a_buy_past_the_daily_limit_is_refused_and_reserves_nothing(use_cases, addresses):
    register_active(use_cases, "demo", "alice")
    address = addresses.next()
    open_btc_account(use_cases, "demo", "alice", address)
    buy(use_cases, "demo", "alice", address, "600")
    buy(use_cases, "demo", "alice", address, "400", stage=False)  # exactly the Basic limit of 1000 EUR
    with pytest.raises(TrustLevelLimitExceeded):
        buy(use_cases, "demo", "alice", address, "10")
    [daily] = [
        u for u in use_cases.limits.usage("demo", "alice") if (u.direction, u.period) == ("buy", "daily")
    ]
    assert (daily.limit, daily.used, daily.remaining, daily.currency) == (1000, 1000, 0, "EUR")
    assert daily.key == "2026-03-10"
    assert used(use_cases, "demo", "alice", "sell") == 0


def test_usd_counts_against_the_limit_at_its_rate_to_base(use_cases, addresses):
    register_active(use_cases, "demo", "alice")
    address = addresses.next()
    open_btc_account(use_cases, "demo", "alice", address)
    in_usd = buy(use_cases, "demo", "alice", address, "1000", method="BANK_USD_BUY", currency="USD")
    assert in_usd.order.limit_amount == Decimal("920.00")
    assert used(use_cases, "demo", "alice", "buy") == Decimal("920.00")
    with pytest.raises(TrustLevelLimitExceeded):
        buy(use_cases, "demo", "alice", address, "80.01")
    buy(use_cases, "demo", "alice", address, "80")
    assert used(use_cases, "demo", "alice", "buy", "monthly") == Decimal("1000")


def test_sells_have_their_own_limit(use_cases, addresses):
    register_active(use_cases, "demo", "alice")
    address = addresses.next()
    account = open_btc_account(use_cases, "demo", "alice", address)
    buy(use_cases, "demo", "alice", address, "1000")
    sell(use_cases, "demo", "alice", account.code, fiat_value="1000")
    with pytest.raises(TrustLevelLimitExceeded):
        sell(use_cases, "demo", "alice", account.code, fiat_value="5")
    assert used(use_cases, "demo", "alice", "sell") == Decimal("1000")


def test_the_daily_limit_starts_afresh_each_day_within_the_monthly_limit(use_cases, addresses, clock):
    register_active(use_cases, "demo", "alice")
    address = addresses.next()
    open_btc_account(use_cases, "demo", "alice", address)
    for _ in range(5):
        buy(use_cases, "demo", "alice", address, "1000", stage=False)
        clock.advance(days=1)
    assert used(use_cases, "demo", "alice", "buy") == 0
    assert used(use_cases, "demo", "alice", "buy", "monthly") == Decimal("5000")
    with pytest.raises(TrustLevelLimitExceeded):
        buy(use_cases, "demo", "alice", address, "10")


# --- reloading ---------------------------------------------------------------------------------------


def test_aggregates_reloaded_by_another_ledger_equal_the_ones_returned(
    make_ledger, ledger, use_cases, addresses
):
    customer = register_active(use_cases, "demo", "alice")
    address = addresses.next()
    account = open_btc_account(use_cases, "demo", "alice", address)
    customer = ledger.store.customer("demo", "alice")
    bought = buy(use_cases, "demo", "alice", address, "123.45", stage=False)
    bought = use_cases.settlement.report_sendout("demo", SendoutReport(bought.code, "sendout-1", 1))
    sold = sell(use_cases, "demo", "alice", account.code, crypto_amount="0.00123456")
    sold = deposit(use_cases, "demo", sold, BTC_CONFIRMED)
    sold = use_cases.settlement.confirm_payout("demo", sold.code, reference="R1", bank_account="B1")

    reader = make_ledger()
    assert reader.store.customer("demo", "alice").__dict__ == customer.__dict__
    assert reader.store.account("demo", account.code).__dict__ == account.__dict__
    assert reader.store.transaction("demo", bought.code).__dict__ == bought.__dict__
    assert reader.store.transaction("demo", sold.code).__dict__ == sold.__dict__
