"""The ReadModels projection against PostgreSQL: a ledger driven through every kind of event is replayed into
the read models, which must say what the aggregates say, count volumes once, and refuse a position twice."""

from __future__ import annotations

import pytest
from eventsourcing.persistence import IntegrityError, Tracking

from application.ledger import Ledger
from application.use_cases import UseCases
from bench.history import Scenario
from domain.account import Account
from domain.customer import Customer
from domain.transaction import Status, Transaction
from interface.shared import transaction_presenters as presenters
from projections.base.runner import APPLICATION, replay
from projections.read_models import ReadModelsProjection
from tests.projections.scenario import READ_MODELS, populate
from tests.projections.support import (
    contents,
    expected_daily_volumes,
    rows,
    tracking_position,
    transactions,
)


@pytest.fixture
def done(store_use_cases: UseCases, clock, addresses) -> Scenario:
    return populate(store_use_cases, clock, addresses)


@pytest.fixture
def view(store_ledger: Ledger, done: Scenario, make_view):
    view = make_view()
    replay(store_ledger, READ_MODELS, view)
    return view


def test_the_scenario_reaches_every_status_and_event_kind(store_ledger, store_use_cases, done):
    statuses = {tx.status for tx in transactions(store_ledger, done)}
    assert statuses == set(Status) - {Status.SIMULATED, Status.PAYOUT_CONFIRMING}
    kinds = {
        type(event).__name__
        for partner, code in done.transactions
        for event in store_use_cases.history.history(partner, code)
    }
    assert kinds == {
        *("Staged", "Initiated", "Committed", "SendoutSeen", "Confirming", "ToPayout", "Blocked"),
        *("PayoutConfirming", "PaidOut", "Completed", "Cancelled", "PaidLate"),
        *("ReceivedAccepted", "RefundStarted", "RefundSendoutSeen", "Refunded", "RefundNotSent"),
    }


def test_the_view_tracks_every_position_of_the_event_log(store_ledger, view):
    assert view.position(APPLICATION) == store_ledger.recorder.max_notification_id()
    assert tracking_position(view) == view.position(APPLICATION)


def test_each_transaction_row_presents_exactly_as_the_aggregate(store_ledger, done, view, settings):
    by_code = {(row["partner"], row["transaction_code"]): row for row in rows(view, "transactions")}
    assert set(by_code) == set(done.transactions)
    for tx in transactions(store_ledger, done):
        row = by_code[tx.order.partner, tx.code]
        assert presenters.transaction_row(settings, row) == presenters.transaction(settings, tx).transaction
        assert row["version"] == tx.version
        assert row["id"] == tx.id
        assert row["cancel_reason"] == tx.cancel_reason
        assert row["payout_reference"] == tx.payout_reference
        assert row["customer_bank_account_id"] == tx.customer_bank_account_id
        assert row["received_crypto_amount"] == (tx.payment.amount if tx.payment else None)
        assert row["crypto_value"] == tx.order.quote.crypto_value
        assert row["limit_amount"] == tx.order.limit_amount


def test_customer_and_account_rows_say_what_the_aggregates_say(store_ledger, done, view):
    customers = {(row["partner"], row["customer_code"]): row for row in rows(view, "customers")}
    assert set(customers) == set(done.customers)
    for partner, code in done.customers:
        customer: Customer = store_ledger.store.customer(partner, code)
        row = customers[partner, code]
        assert (row["status"], row["trust_level"], row["currency_code"]) == (
            customer.status,
            customer.trust_level,
            customer.currency,
        )
        assert (row["account_count"], row["version"]) == (len(customer.account_codes), customer.version)
        assert (row["created"], row["updated"]) == (customer.created, customer.updated)
    accounts = {(row["partner"], row["account_code"]): row for row in rows(view, "accounts")}
    assert set(accounts) == set(done.accounts)
    for partner, code in done.accounts:
        account: Account = store_ledger.store.account(partner, code)
        row = accounts[partner, code]
        assert (row["customer_code"], row["crypto_code"]) == (account.customer_code, account.crypto)
        assert (row["customer_address"], row["deposit_address"], row["deposit_path"]) == (
            account.customer_address,
            account.deposit_address,
            account.deposit_path,
        )


def test_each_change_of_status_is_one_row_of_the_status_history(store_ledger, store_use_cases, done, view):
    expected = []
    for partner, code in done.transactions:
        previous = None
        for event in store_use_cases.history.history(partner, code):
            version = event.originator_version
            status = store_ledger.repository.get(Transaction.create_id(partner, code), version=version).status
            if status != previous:
                expected.append((partner, code, version, previous, status, type(event).__name__, event.at))
            previous = status
    columns = ("partner", "transaction_code", "version", "from_status", "to_status", "event_type", "at")
    actual = [tuple(r[name] for name in columns) for r in rows(view, "transaction_status_history")]
    assert sorted(actual) == sorted(expected, key=lambda row: (row[0], row[1], row[2]))


def test_daily_volumes_count_every_transaction_but_the_cancelled_and_refunded_ones(store_ledger, done, view):
    key = ("partner", "day", "customer_code", "payment_method_code", "type", "currency_code", "crypto_code")
    sums = ("count", "fiat_value", "crypto_amount", "fees_fiat", "fees_crypto")
    actual = {
        tuple(r[name] for name in key): {name: r[name] for name in sums} for r in rows(view, "daily_volumes")
    }
    assert actual == expected_daily_volumes(store_ledger, done)
    assert len({key[1] for key in actual}) == 2  # the scenario spans two days


def test_monthly_volumes_sum_the_days_of_each_month(view):
    monthly = rows(view, "monthly_volumes")
    daily = rows(view, "daily_volumes")
    assert sum(r["count"] for r in monthly) == sum(r["count"] for r in daily)
    assert sum(r["fiat_value"] for r in monthly) == sum(r["fiat_value"] for r in daily)
    assert {r["month"].day for r in monthly} == {1}


def test_applying_a_position_again_is_refused_and_changes_nothing(store_ledger, view):
    before = contents(view)
    projection = ReadModelsProjection(view=view)
    for notification in store_ledger.recorder.select_notifications(start=1, limit=1000):
        event = store_ledger.mapper.to_domain_event(notification)
        with pytest.raises(IntegrityError):
            projection.process_event(event, Tracking(APPLICATION, notification.id))
    assert contents(view) == before
    assert view.position(APPLICATION) == store_ledger.recorder.max_notification_id()


def test_an_event_delivered_again_under_a_later_position_changes_no_row(store_ledger, view):
    """Each handler is safe on its own: rows are inserted once and updated only by newer versions, so
    volumes are not counted twice even if the same event came again."""
    before = contents(view)
    projection = ReadModelsProjection(view=view)
    position = view.position(APPLICATION)
    for notification in store_ledger.recorder.select_notifications(start=1, limit=1000):
        position += 1
        projection.process_event(
            store_ledger.mapper.to_domain_event(notification), Tracking(APPLICATION, position)
        )
    assert contents(view) == before
    assert view.position(APPLICATION) == position


def test_a_reset_and_replayed_view_equals_the_first_replay(store_ledger, view):
    before = contents(view)
    view.reset()
    assert view.position(APPLICATION) == 0
    assert all(not table for table in contents(view).values())
    replay(store_ledger, READ_MODELS, view)
    assert contents(view) == before
