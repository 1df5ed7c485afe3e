"""The transaction's rules, each with its allowed and its refused side."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest

from domain.errors import (
    ChainReportConflict,
    InvalidStateTransition,
    PayoutsFeatureDisabled,
    TransactionExpired,
    TransactionNotStaged,
)
from domain.transaction import (
    ChainPayment,
    Status,
    Transaction,
    TransactionType,
    balance_mutation,
)
from tests.unit.builders import (
    LATER,
    NOW,
    REQUIRED,
    VALID_UNTIL,
    assert_nothing_recorded,
    assert_refused,
    deposit,
    initiated_sell,
    order,
    sell_in,
    sending_buy,
    staged_buy,
    store,
)

PAST_VALIDITY = VALID_UNTIL + timedelta(seconds=1)

# --- creation ---------------------------------------------------------------------------------------


def test_a_buy_order_is_staged_and_a_sell_order_is_initiated() -> None:
    buy, sell = staged_buy(), initiated_sell()
    assert (buy.status, sell.status) == (Status.STAGED, Status.INITIATED)
    assert (buy.created, buy.updated, buy.valid_until) == (NOW, NOW, VALID_UNTIL)
    assert buy.payment is None and sell.payment is None
    assert buy.is_open and sell.is_open


def test_a_sell_order_cannot_be_staged_as_a_buy_nor_a_buy_initiated_as_a_sell() -> None:
    with pytest.raises(ValueError):
        Transaction.stage_buy(order(TransactionType.SELL), NOW, VALID_UNTIL)
    with pytest.raises(ValueError):
        Transaction.initiate_sell(order(TransactionType.BUY), NOW, VALID_UNTIL)


def test_transaction_ids_are_deterministic_per_partner_and_code() -> None:
    same = Transaction.create_id("partner-a", "TX0001")
    assert staged_buy().id == same
    assert initiated_sell().id == same
    assert staged_buy(partner="partner-b").id != same
    assert staged_buy(code="TX0002").id != same


def test_a_buy_mutates_no_balance_and_a_sell_takes_crypto_and_pays_fiat() -> None:
    assert balance_mutation(order(TransactionType.BUY)) == (0, 0)
    sell = order(TransactionType.SELL)
    assert balance_mutation(sell) == (-sell.quote.crypto_amount, sell.quote.fiat_value)
    assert balance_mutation(sell)[0] < 0 < balance_mutation(sell)[1]


# --- commit -----------------------------------------------------------------------------------------


def test_a_staged_buy_can_be_committed_before_valid_until() -> None:
    buy = staged_buy()
    buy.commit(LATER)
    assert buy.status == Status.SENDING
    assert buy.updated == LATER


def test_a_staged_buy_can_be_committed_exactly_at_valid_until() -> None:
    buy = staged_buy()
    buy.commit(VALID_UNTIL)
    assert buy.status == Status.SENDING


def test_a_staged_buy_past_valid_until_cannot_be_committed() -> None:
    buy = staged_buy()
    assert_refused(buy, TransactionExpired, lambda: buy.commit(PAST_VALIDITY))
    assert buy.status == Status.STAGED


def test_staged_buy_cannot_be_committed_twice() -> None:
    buy = sending_buy()
    assert_refused(buy, TransactionNotStaged, lambda: buy.commit(LATER))


def test_a_sell_cannot_be_committed() -> None:
    sell = initiated_sell()
    assert_refused(sell, TransactionNotStaged, lambda: sell.commit(LATER))


# --- expire -----------------------------------------------------------------------------------------


def test_a_staged_buy_past_valid_until_can_be_expired() -> None:
    buy = staged_buy()
    buy.expire(PAST_VALIDITY)
    assert buy.status == Status.CANCELLED
    assert buy.cancel_reason == "expired"
    assert not buy.is_open


def test_a_staged_buy_cannot_be_expired_until_valid_until_has_passed() -> None:
    buy = staged_buy()
    assert_refused(buy, InvalidStateTransition, lambda: buy.expire(VALID_UNTIL))
    assert not buy.is_overdue(VALID_UNTIL)
    assert buy.is_overdue(PAST_VALIDITY)


def test_an_unpaid_sell_past_valid_until_can_be_expired() -> None:
    sell = initiated_sell()
    sell.expire(PAST_VALIDITY)
    assert sell.status == Status.CANCELLED


@pytest.mark.parametrize("status", [Status.CONFIRMING, Status.TO_PAYOUT, Status.BLOCKED])
def test_a_paid_sell_cannot_be_expired(status: Status) -> None:
    sell = sell_in(status)
    assert_refused(sell, InvalidStateTransition, lambda: sell.expire(PAST_VALIDITY))


def test_a_committed_buy_cannot_be_expired() -> None:
    buy = sending_buy()
    assert_refused(buy, InvalidStateTransition, lambda: buy.expire(PAST_VALIDITY))


def test_a_cancelled_buy_cannot_be_expired_again() -> None:
    buy = staged_buy()
    buy.expire(PAST_VALIDITY)
    assert_refused(buy, InvalidStateTransition, lambda: buy.expire(PAST_VALIDITY))


# --- cancel -----------------------------------------------------------------------------------------


def test_a_staged_buy_can_be_cancelled() -> None:
    buy = staged_buy()
    buy.cancel(LATER, "payment failed")
    assert buy.status == Status.CANCELLED
    assert buy.cancel_reason == "payment failed"


def test_a_committed_buy_cannot_be_cancelled() -> None:
    buy = sending_buy()
    assert_refused(buy, InvalidStateTransition, lambda: buy.cancel(LATER, "payment failed"))


def test_a_sell_cannot_be_cancelled() -> None:
    sell = initiated_sell()
    assert_refused(sell, InvalidStateTransition, lambda: sell.cancel(LATER, "payment failed"))


# --- sendout ----------------------------------------------------------------------------------------


def test_a_sendout_with_enough_confirmations_completes_a_sending_buy() -> None:
    buy = sending_buy()
    buy.report_sendout(ChainPayment("tx-1", REQUIRED), REQUIRED, LATER)
    assert buy.status == Status.COMPLETED
    assert buy.payment == ChainPayment("tx-1", REQUIRED)


def test_a_sendout_with_fewer_confirmations_is_recorded_and_the_buy_stays_sending() -> None:
    buy = sending_buy()
    buy.report_sendout(ChainPayment("tx-1", 1), REQUIRED, LATER)
    assert buy.status == Status.SENDING
    assert buy.payment == ChainPayment("tx-1", 1)


def test_a_later_sendout_report_with_more_confirmations_completes_the_buy() -> None:
    buy = sending_buy()
    buy.report_sendout(ChainPayment("tx-1", 1), REQUIRED, LATER)
    buy.report_sendout(ChainPayment("tx-1", REQUIRED + 1), REQUIRED, LATER)
    assert buy.status == Status.COMPLETED
    assert buy.payment.confirmations == REQUIRED + 1


def test_the_same_sendout_report_twice_changes_nothing() -> None:
    buy = sending_buy()
    buy.report_sendout(ChainPayment("tx-1", 1), REQUIRED, LATER)
    assert_nothing_recorded(buy, lambda: buy.report_sendout(ChainPayment("tx-1", 1), REQUIRED, LATER))
    buy.report_sendout(ChainPayment("tx-1", REQUIRED), REQUIRED, LATER)
    assert_nothing_recorded(
        buy, lambda: buy.report_sendout(ChainPayment("tx-1", REQUIRED + 5), REQUIRED, LATER)
    )


def test_a_different_tx_id_for_the_same_buy_is_a_chain_report_conflict() -> None:
    buy = sending_buy()
    buy.report_sendout(ChainPayment("tx-1", 1), REQUIRED, LATER)
    assert_refused(
        buy, ChainReportConflict, lambda: buy.report_sendout(ChainPayment("tx-2", 9), REQUIRED, LATER)
    )


def test_a_sendout_cannot_be_reported_for_a_staged_or_cancelled_buy() -> None:
    buy = staged_buy()
    report = ChainPayment("tx-1", REQUIRED)
    assert_refused(buy, InvalidStateTransition, lambda: buy.report_sendout(report, REQUIRED, LATER))
    buy.cancel(LATER, "payment failed")
    assert_refused(buy, InvalidStateTransition, lambda: buy.report_sendout(report, REQUIRED, LATER))


def test_a_sendout_cannot_be_reported_for_a_sell() -> None:
    sell = initiated_sell()
    report = ChainPayment("tx-1", REQUIRED)
    assert_refused(sell, InvalidStateTransition, lambda: sell.report_sendout(report, REQUIRED, LATER))


# --- deposit ----------------------------------------------------------------------------------------


def test_a_confirmed_deposit_of_the_expected_amount_moves_a_sell_to_to_payout_with_payouts() -> None:
    sell = initiated_sell()
    sell.report_deposit(deposit(sell), REQUIRED, True, LATER)
    assert sell.status == Status.TO_PAYOUT
    assert sell.payment == deposit(sell)
    assert sell.updated == LATER


def test_a_confirmed_deposit_of_the_expected_amount_completes_a_sell_without_payouts() -> None:
    sell = initiated_sell()
    sell.report_deposit(deposit(sell), REQUIRED, False, LATER)
    assert sell.status == Status.COMPLETED


@pytest.mark.parametrize("difference", [Decimal("0.00000001"), Decimal("-0.00000001")])
def test_a_sell_whose_deposit_amount_differs_becomes_blocked(difference: Decimal) -> None:
    sell = initiated_sell()
    paid = sell.order.quote.crypto_amount + difference
    sell.report_deposit(ChainPayment("tx-1", REQUIRED, paid), REQUIRED, True, LATER)
    assert sell.status == Status.BLOCKED
    assert sell.payment.amount == paid


def test_a_deposit_of_the_expected_amount_written_with_more_zeros_is_not_blocked() -> None:
    sell = initiated_sell()
    paid = Decimal(f"{sell.order.quote.crypto_amount}0000")
    sell.report_deposit(ChainPayment("tx-1", REQUIRED, paid), REQUIRED, True, LATER)
    assert sell.status == Status.TO_PAYOUT


def test_a_deposit_with_fewer_confirmations_than_required_makes_the_sell_confirming() -> None:
    sell = initiated_sell()
    sell.report_deposit(deposit(sell, confirmations=REQUIRED - 1), REQUIRED, True, LATER)
    assert sell.status == Status.CONFIRMING


@pytest.mark.parametrize(("payouts", "final"), [(True, Status.TO_PAYOUT), (False, Status.COMPLETED)])
def test_a_later_report_with_more_confirmations_moves_a_confirming_sell_on(
    payouts: bool, final: Status
) -> None:
    sell = initiated_sell()
    sell.report_deposit(deposit(sell, confirmations=1), REQUIRED, payouts, LATER)
    sell.report_deposit(deposit(sell, confirmations=REQUIRED - 1), REQUIRED, payouts, LATER)
    assert sell.status == Status.CONFIRMING
    sell.report_deposit(deposit(sell, confirmations=REQUIRED), REQUIRED, payouts, LATER)
    assert sell.status == final
    assert sell.payment.confirmations == REQUIRED


def test_the_same_deposit_report_twice_changes_nothing() -> None:
    sell = initiated_sell()
    sell.report_deposit(deposit(sell, confirmations=1), REQUIRED, True, LATER)
    again = deposit(sell, confirmations=1)
    assert_nothing_recorded(sell, lambda: sell.report_deposit(again, REQUIRED, True, LATER))
    assert sell.status == Status.CONFIRMING


def test_a_report_with_fewer_confirmations_than_before_changes_nothing() -> None:
    sell = initiated_sell()
    sell.report_deposit(deposit(sell, confirmations=2), REQUIRED, True, LATER)
    fewer = deposit(sell, confirmations=1)
    assert_nothing_recorded(sell, lambda: sell.report_deposit(fewer, REQUIRED, True, LATER))


@pytest.mark.parametrize("status", [Status.TO_PAYOUT, Status.PAYOUT_CONFIRMING, Status.BLOCKED])
def test_a_report_with_more_confirmations_after_the_sell_moved_on_changes_nothing(
    status: Status,
) -> None:
    sell = sell_in(status)
    more = ChainPayment("tx-1", REQUIRED + 5, sell.payment.amount)
    assert_nothing_recorded(sell, lambda: sell.report_deposit(more, REQUIRED, True, LATER))


def test_a_different_tx_id_for_the_same_sell_is_a_chain_report_conflict() -> None:
    sell = sell_in(Status.CONFIRMING)
    other = deposit(sell, confirmations=REQUIRED, tx_id="tx-2")
    assert_refused(sell, ChainReportConflict, lambda: sell.report_deposit(other, REQUIRED, True, LATER))


def test_the_same_tx_id_with_another_amount_is_a_chain_report_conflict() -> None:
    sell = sell_in(Status.CONFIRMING)
    other = ChainPayment("tx-1", REQUIRED, sell.order.quote.crypto_amount * 2)
    assert_refused(sell, ChainReportConflict, lambda: sell.report_deposit(other, REQUIRED, True, LATER))


def test_a_deposit_cannot_be_reported_for_a_buy() -> None:
    buy = sending_buy()
    report = ChainPayment("tx-1", REQUIRED, Decimal("0.001"))
    assert_refused(buy, InvalidStateTransition, lambda: buy.report_deposit(report, REQUIRED, True, LATER))


def test_a_payment_to_a_sell_the_sweep_cancelled_is_recorded_as_late_to_refund() -> None:
    sell = sell_in(Status.CANCELLED)
    report = deposit(sell)
    sell.report_deposit(report, REQUIRED, True, PAST_VALIDITY)
    assert (sell.status, sell.cancel_reason, sell.payment) == (Status.CANCELLED, "expired", report)
    assert [type(e).__name__ for e in sell.collect_events()][-1] == "PaidLate"


@pytest.mark.parametrize("paid", [Decimal(1), Decimal("0.5")], ids=["expected", "another amount"])
def test_a_payment_first_seen_after_valid_until_cancels_the_sell_before_the_sweep_does(
    paid: Decimal,
) -> None:
    sell = initiated_sell()
    report = ChainPayment("tx-1", REQUIRED, sell.order.quote.crypto_amount * paid)
    sell.report_deposit(report, REQUIRED, True, PAST_VALIDITY)
    assert (sell.status, sell.cancel_reason, sell.payment) == (Status.CANCELLED, "expired", report)
    assert not sell.is_open and sell.updated == PAST_VALIDITY


def test_a_payment_first_seen_at_valid_until_is_on_time() -> None:
    sell = initiated_sell()
    sell.report_deposit(deposit(sell), REQUIRED, True, VALID_UNTIL)
    assert sell.status == Status.TO_PAYOUT


def test_a_payment_seen_in_time_is_paid_out_when_confirmed_after_valid_until() -> None:
    sell = sell_in(Status.CONFIRMING)
    sell.report_deposit(deposit(sell), REQUIRED, True, PAST_VALIDITY)
    assert sell.status == Status.TO_PAYOUT


def test_a_late_payment_reported_again_changes_nothing_and_another_one_conflicts() -> None:
    sell = initiated_sell()
    sell.report_deposit(deposit(sell, confirmations=1), REQUIRED, True, PAST_VALIDITY)
    sell.collect_events()
    assert_nothing_recorded(sell, lambda: sell.report_deposit(deposit(sell), REQUIRED, True, PAST_VALIDITY))
    other = deposit(sell, tx_id="tx-2")
    assert_refused(
        sell, ChainReportConflict, lambda: sell.report_deposit(other, REQUIRED, True, PAST_VALIDITY)
    )


def test_a_buy_sent_at_once_is_sending_from_its_first_event_and_records_staged_and_committed() -> None:
    buy = Transaction.send_buy(order(TransactionType.BUY), NOW, VALID_UNTIL)
    events = buy.collect_events()
    assert [type(e).__name__ for e in events] == ["Staged", "Committed"]
    assert events[0].commit_at_once and events[0].mutate(None).status == Status.SENDING
    assert (buy.status, buy.updated) == (Status.SENDING, NOW)
    assert not buy.is_overdue(PAST_VALIDITY)


# --- payouts ----------------------------------------------------------------------------------------


def test_payoutconfirming_is_allowed_from_to_payout() -> None:
    sell = sell_in(Status.TO_PAYOUT)
    sell.confirm_payout(True, LATER, "ref-1", "bank-1")
    assert sell.status == Status.PAYOUT_CONFIRMING
    assert (sell.payout_reference, sell.customer_bank_account_id) == ("ref-1", "bank-1")


@pytest.mark.parametrize(
    "status",
    [
        Status.INITIATED,
        Status.CONFIRMING,
        Status.PAYOUT_CONFIRMING,
        Status.COMPLETED,
        Status.BLOCKED,
        Status.CANCELLED,
    ],
)
def test_payoutconfirming_is_refused_from_any_status_but_to_payout(status: Status) -> None:
    sell = sell_in(status)
    assert_refused(sell, InvalidStateTransition, lambda: sell.confirm_payout(True, LATER, "ref-2", None))


@pytest.mark.parametrize("status", [Status.TO_PAYOUT, Status.PAYOUT_CONFIRMING])
def test_payout_is_allowed_from_to_payout_or_payout_confirming(status: Status) -> None:
    sell = sell_in(status)
    sell.pay_out(True, LATER, None, "bank-9")
    assert sell.status == Status.COMPLETED
    assert sell.customer_bank_account_id == "bank-9"
    assert sell.payout_reference == ("ref-1" if status == Status.PAYOUT_CONFIRMING else None)


@pytest.mark.parametrize(
    "status",
    [Status.INITIATED, Status.CONFIRMING, Status.COMPLETED, Status.BLOCKED, Status.CANCELLED],
)
def test_payout_is_refused_from_any_other_status(status: Status) -> None:
    sell = sell_in(status)
    assert_refused(sell, InvalidStateTransition, lambda: sell.pay_out(True, LATER, "ref", None))


@pytest.mark.parametrize("status", [Status.TO_PAYOUT, Status.PAYOUT_CONFIRMING, Status.INITIATED])
def test_payouts_disabled_refuses_payoutconfirming_and_payout(status: Status) -> None:
    sell = sell_in(status)
    assert_refused(sell, PayoutsFeatureDisabled, lambda: sell.confirm_payout(False, LATER, None, None))
    assert_refused(sell, PayoutsFeatureDisabled, lambda: sell.pay_out(False, LATER, None, None))


def test_a_buy_has_no_payout() -> None:
    buy = sending_buy()
    assert_refused(buy, InvalidStateTransition, lambda: buy.confirm_payout(True, LATER, None, None))
    assert_refused(buy, InvalidStateTransition, lambda: buy.pay_out(True, LATER, None, None))


# --- the store --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "status",
    [Status.CONFIRMING, Status.TO_PAYOUT, Status.PAYOUT_CONFIRMING, Status.BLOCKED, Status.CANCELLED],
)
def test_a_sell_reloaded_from_the_store_equals_the_one_in_memory(status: Status) -> None:
    events = store()
    sell = sell_in(status)
    events.save(sell)
    reloaded = events.repository.get(sell.id)
    assert reloaded.__dict__ == sell.__dict__
    assert reloaded.order.quote == sell.order.quote
    assert reloaded.payment == sell.payment


def test_a_completed_buy_reloaded_from_the_store_equals_the_one_in_memory() -> None:
    events = store()
    buy = sending_buy()
    buy.report_sendout(ChainPayment("tx-1", REQUIRED), REQUIRED, LATER)
    events.save(buy)
    assert events.repository.get(buy.id).__dict__ == buy.__dict__


def test_the_partner_data_of_an_order_survives_the_store() -> None:
    events = store()
    buy = staged_buy(data={"orderRef": "A-17", "note": "first"})
    events.save(buy)
    assert events.repository.get(buy.id).order.data == {"orderRef": "A-17", "note": "first"}


@pytest.mark.parametrize(
    "data",
    [{"_type_": "x", "_data_": "y"}, {"_type_": "decimal_str", "_data_": "1"}],
    ids=["unknown-type", "decimal"],
)
def test_partner_data_shaped_like_a_transcoded_value_survives_the_store(
    data: dict[str, str],
) -> None:
    events = store()
    buy = staged_buy(data=data)
    events.save(buy)
    assert events.repository.get(buy.id).order.data == data
