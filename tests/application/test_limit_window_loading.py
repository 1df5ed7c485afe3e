"""A limit window loads from its latest event alone, which carries its total: a buy reads one event per window
however many orders its day and month hold. Windows stored before events carried the total still load
right, from their history; limits still refuse and give back, and an order still counts once."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from decimal import Decimal
from typing import Any
from uuid import UUID

import pytest
from eventsourcing.domain import Snapshot
from eventsourcing.persistence import Mapper
from psycopg.sql import SQL, Identifier

from application.commands import BuyRequest
from application.ledger import Ledger
from application.use_cases import UseCases
from domain.errors import InvalidStateTransition, TrustLevelLimitExceeded
from domain.limits import PERIODS, LimitWindow, period_key
from tests.application.conftest import race
from tests.unit.test_limits import in_format_before_totals

AMOUNT = Decimal("10.01")
WINDOW_TOPIC = "domain.limits:LimitWindow"


def buy_request(customer: str, address: str, fiat_value: Decimal = AMOUNT) -> BuyRequest:
    return BuyRequest(customer, "EUR", "BTC", fiat_value, address, "BANK_EUR_BUY")


def window_ids(ledger: Ledger, customer: str) -> list[UUID]:
    now = ledger.clock.now()
    return [LimitWindow.create_id("demo", customer, "buy", period_key(period, now)) for period in PERIODS]


def used(use_cases: UseCases, customer: str) -> dict[str, Decimal]:
    return {u.period: u.used for u in use_cases.limits.usage("demo", customer) if u.direction == "buy"}


def versions(ledger: Ledger, customer: str) -> list[int]:
    return [
        ledger.recorder.select_events(i, desc=True, limit=1)[0].originator_version
        for i in window_ids(ledger, customer)
    ]


@contextmanager
def counting_reads(ledger: Ledger) -> Iterator[Counter[str]]:
    """Counts the events the ledger decodes, and the window rows its read-ahead query returns."""
    counts: Counter[str] = Counter()
    decode, read = ledger.mapper.to_domain_event, ledger.recorder.select_histories_and_latest_of

    def decoding(stored: Any) -> Any:
        counts["decoded"] += 1
        counts["window events decoded"] += stored.topic.startswith(WINDOW_TOPIC)
        return decode(stored)

    def reading(*args: Any) -> list[Any]:
        rows = read(*args)
        counts["window rows read"] += sum(row.topic.startswith(WINDOW_TOPIC) for row in rows)
        return rows

    ledger.mapper.to_domain_event = decoding
    ledger.recorder.select_histories_and_latest_of = reading
    try:
        yield counts
    finally:
        del ledger.mapper.to_domain_event, ledger.recorder.select_histories_and_latest_of


def test_a_window_holding_many_buys_loads_from_its_latest_event_alone(
    ledger, use_cases, active_customer_with_btc_account
):
    _, account = active_customer_with_btc_account("demo", "busy", "Plus")
    request = buy_request("busy", account.customer_address)
    for _ in range(60):
        use_cases.buys.create("demo", request, stage=False)
    with counting_reads(ledger) as counts:
        use_cases.buys.create("demo", request, stage=False)
    assert counts["window rows read"] == counts["window events decoded"] == 2
    assert versions(ledger, "busy") == [62, 62]
    assert used(use_cases, "busy") == {"daily": 61 * AMOUNT, "monthly": 61 * AMOUNT}
    assert all(not list(ledger.snapshots.get(i)) for i in window_ids(ledger, "busy"))


def test_a_window_replayed_from_its_history_equals_the_one_built_from_its_latest_event(
    ledger, use_cases, active_customer_with_btc_account
):
    _, account = active_customer_with_btc_account("demo", "busy", "Plus")
    staged = use_cases.buys.create("demo", buy_request("busy", account.customer_address), stage=True)
    use_cases.buys.create(
        "demo", buy_request("busy", account.customer_address, Decimal("20.00")), stage=False
    )
    use_cases.alternative.cancel_staged("demo", staged.code, "payment failed")
    for window_id in window_ids(ledger, "busy"):
        replayed = ledger.repository.get(window_id)
        built = LimitWindow.as_left_by(
            ledger.store.latest_event(window_id), "demo", "busy", "buy", replayed.period, replayed.key
        )
        assert (built.version, built.used) == (replayed.version, replayed.used) == (4, Decimal("20.00"))
        assert {**built.__dict__, "_created_on": None} == {**replayed.__dict__, "_created_on": None}


def to_format_before_totals(ledger: Ledger, window_id: UUID) -> None:
    """Rewrites the window's stored events as the ledger stored them before events carried the total (the
    library's mapper and JSON transcoder), and stores a snapshot of it at version 16 as the ledger then took
    one (with its reservations by transaction)."""
    old = in_format_before_totals(list(ledger.repository.event_store.get(window_id)))
    first_format = Mapper(transcoder=ledger.mapper.transcoder)
    datastore = ledger.recorder.datastore
    table = Identifier(datastore.schema, ledger.recorder.events_table_name)
    update = SQL("UPDATE {} SET state = %s WHERE originator_id = %s AND originator_version = %s")
    with datastore.transaction(commit=True) as curs:
        for stored in (first_format.to_stored_event(e) for e in old):
            curs.execute(
                update.format(table), (stored.state, stored.originator_id, stored.originator_version)
            )
            assert b'"used"' not in stored.state
    at_16 = ledger.repository.get(window_id, version=16)
    assert set(at_16.reservations) and at_16.version == 16
    ledger.snapshots.put([Snapshot.take(at_16)])


def test_a_window_stored_before_events_carried_the_total_loads_with_its_total_and_moves_on(
    ledger, use_cases, active_customer_with_btc_account
):
    _, account = active_customer_with_btc_account("demo", "old", "Plus")
    request = buy_request("old", account.customer_address)
    staged = use_cases.buys.create("demo", request, stage=True)
    for _ in range(19):
        use_cases.buys.create("demo", request, stage=False)
    for window_id in window_ids(ledger, "old"):
        to_format_before_totals(ledger, window_id)
        assert (
            LimitWindow.as_left_by(ledger.store.latest_event(window_id), "demo", "old", "buy", "", "") is None
        )

    assert used(use_cases, "old") == {"daily": 20 * AMOUNT, "monthly": 20 * AMOUNT}
    use_cases.alternative.cancel_staged("demo", staged.code, "payment failed")
    assert used(use_cases, "old") == {"daily": 19 * AMOUNT, "monthly": 19 * AMOUNT}
    with counting_reads(ledger) as counts:
        use_cases.buys.create("demo", request, stage=False)
    assert counts["window rows read"] == counts["window events decoded"] == 2
    assert used(use_cases, "old") == {"daily": 20 * AMOUNT, "monthly": 20 * AMOUNT}
    assert versions(ledger, "old") == [23, 23]
    for window_id in window_ids(ledger, "old"):
        assert ledger.repository.get(window_id).used == 20 * AMOUNT


def test_a_buy_over_the_limit_is_refused_and_a_cancelled_buy_gives_its_amount_back(
    ledger, use_cases, active_customer_with_btc_account
):
    _, account = active_customer_with_btc_account("demo", "basic", "Basic")
    use_cases.buys.create("demo", buy_request("basic", account.customer_address, Decimal("600")), stage=False)
    staged = use_cases.buys.create(
        "demo", buy_request("basic", account.customer_address, Decimal("400")), stage=True
    )
    assert used(use_cases, "basic")["daily"] == Decimal("1000")
    with pytest.raises(TrustLevelLimitExceeded, match="0 EUR remaining"):
        use_cases.buys.create(
            "demo", buy_request("basic", account.customer_address, Decimal("10")), stage=False
        )
    assert versions(ledger, "basic") == [3, 3]

    use_cases.alternative.cancel_staged("demo", staged.code, "payment failed")
    assert used(use_cases, "basic")["daily"] == Decimal("600")
    with pytest.raises(InvalidStateTransition):
        use_cases.alternative.cancel_staged("demo", staged.code, "payment failed")
    assert used(use_cases, "basic")["daily"] == Decimal("600")
    assert versions(ledger, "basic") == [4, 4]
    use_cases.buys.create("demo", buy_request("basic", account.customer_address, Decimal("400")), stage=False)
    assert used(use_cases, "basic")["daily"] == Decimal("1000")


def test_a_create_retried_under_its_code_counts_its_buy_once(
    ledger, use_cases, active_customer_with_btc_account
):
    _, account = active_customer_with_btc_account("demo", "retry", "Basic")
    request = buy_request("retry", account.customer_address, Decimal("300"))
    first = use_cases.buys.create("demo", request, stage=False, code="KEYED-1")
    again = use_cases.buys.create("demo", request, stage=False, code="KEYED-1")
    assert again.code == first.code and again.version == first.version
    assert used(use_cases, "retry")["daily"] == Decimal("300")
    assert versions(ledger, "retry") == [2, 2]


def test_concurrent_cancels_of_one_staged_buy_give_its_amount_back_once(
    make_use_cases, pooled_env, active_customer_with_btc_account
):
    _, account = active_customer_with_btc_account("demo", "twice", "Basic")
    use_cases = make_use_cases(pooled_env)
    ledger = use_cases.ledger
    request = buy_request("twice", account.customer_address, Decimal("300"))
    use_cases.buys.create("demo", request, stage=False)
    staged = use_cases.buys.create("demo", request, stage=True)

    outcomes = race(8, lambda _: use_cases.alternative.cancel_staged("demo", staged.code, "payment failed"))

    assert sum(not isinstance(o, Exception) for o in outcomes) == 1
    assert all(isinstance(o, InvalidStateTransition) for o in outcomes if isinstance(o, Exception))
    assert used(use_cases, "twice") == {"daily": Decimal("300"), "monthly": Decimal("300")}
    assert versions(ledger, "twice") == [4, 4]
