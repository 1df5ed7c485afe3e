"""Rebuilding every projection in one pass over the event log (`projections.rebuild`): each page is read once
and handed to every projection, which writes its rows and its own position in its own transaction. The
rebuilt tables equal those a live run writes, whatever the page size; every projection ends at the head of
the log; a pass interrupted midway, or stopped for one projection by an event it cannot apply, resumes from
each projection's own position; and `projections rebuild` rebuilds them all in one process."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import pytest
from psycopg.sql import SQL

from application.commands import AdjustmentRequest
from application.ledger import Ledger
from application.use_cases import UseCases
from bench.history import Driver
from projections import rebuild
from projections.base.postgres import ReadModel
from projections.base.runner import ProjectionFailed, apply_page, exclusive, open_view
from projections.catalog import PROJECTIONS, by_name
from projections.lanes import Lane
from projections.ledger_postings import Postings
from projections.live import ProjectionWorker
from projections.rebuild import replay_all
from tests.projections.scenario import populate
from tests.projections.support import run_cli as run

CALLBACK_URL = "https://hooks.partner.example/broker"
OUTBOX_COLUMNS = (  # what the projection writes of a delivery (the rest is the delivery worker's)
    "event_id, partner, transaction_id, transaction_code, sequence, transaction_status, url, topic, version,"
    " state, created, notification_id"
)


def trade_with_callbacks(use_cases: UseCases, clock: Any, addresses: Any) -> None:
    """Buys and sells whose status changes are announced to a callback URL, so the outbox has deliveries."""
    drive = Driver(use_cases, clock, addresses)
    drive.customer("demo", "carol")
    bought = drive.buy("demo", "carol", "80", callback_url=CALLBACK_URL)
    use_cases.buys.commit("demo", bought.code)
    drive.sendout(bought, 2)
    sold = drive.sell("demo", "carol", "0.001", callback_url=CALLBACK_URL)
    drive.deposit(sold, 1)
    drive.deposit(sold, 2)
    drive.deposit(drive.sell("demo", "carol", "0.002", callback_url=CALLBACK_URL), 2, Decimal("0.0001"))


def adjust_each_partners_reserves(use_cases: UseCases) -> None:
    """Both partners' operators name a `cold-1` of their own (of two types) and move into it."""
    for partner, kind, asset in (("demo", "ColdStore", "BTC"), ("other", "Exchange", "EUR")):
        hot = ("hot-wallet", "HotWallet") if asset == "BTC" else ("bank", "Exchange")
        opening = AdjustmentRequest("OpeningBalance", asset, Decimal(1000), *hot)
        use_cases.reserves.record_adjustment(partner, opening)
        move = AdjustmentRequest("Move", asset, Decimal(1), "cold-1", kind, *hot)
        use_cases.reserves.record_adjustment(partner, move)


@pytest.fixture
def head(store_ledger: Ledger, store_use_cases: UseCases, clock: Any, addresses: Any) -> int:
    """A store with every kind of event (the projection tests' scenario, callbacks and both partners'
    reserve adjustments); its last position."""
    populate(store_use_cases, clock, addresses)
    trade_with_callbacks(store_use_cases, clock, addresses)
    adjust_each_partners_reserves(store_use_cases)
    return store_ledger.recorder.max_notification_id()


@pytest.fixture
def lanes_in(fresh_database: str) -> Iterator[Any]:
    """Makes a lane per projection (or per projection named) with its tables in `schema`. Lanes made again
    in a schema replace those made there before, as a pass started anew: the earlier ones' connections are
    closed (they are not used again)."""
    opened: dict[str, list[ReadModel]] = {}

    def make(schema: str, names: tuple[str, ...] = ()) -> list[Lane]:
        for view in opened.pop(schema, []):
            view.datastore.close()
        specs = [by_name(name) for name in names] if names else PROJECTIONS
        views = [open_view(fresh_database, spec, schema=schema) for spec in specs]
        opened[schema] = views
        return [Lane(spec, view) for spec, view in zip(specs, views, strict=True)]

    yield make
    for views in opened.values():
        for view in views:
            view.datastore.close()


def tables(view: ReadModel) -> dict[str, list[tuple[Any, ...]]]:
    """Every table the projection writes, row by row (of the outbox, what the projection writes)."""
    found = {}
    with view.datastore.transaction(commit=False) as curs:
        for table in view.tables:
            statement = SQL("SELECT * FROM {} AS t ORDER BY t::text").format(view.table(table))
            found[table] = [tuple(row.values()) for row in curs.execute(statement).fetchall()]
        if view.tables == ("callback_transactions",):
            statement = SQL("SELECT " + OUTBOX_COLUMNS + " FROM {} ORDER BY event_id")
            found["callback_outbox"] = [
                tuple(row.values())
                for row in curs.execute(statement.format(view.table("callback_outbox"))).fetchall()
            ]
    return found


def every_table(lanes: list[Lane]) -> dict[str, dict[str, list[tuple[Any, ...]]]]:
    return {lane.spec.name: tables(lane.view) for lane in lanes}


def test_one_pass_writes_every_projection_as_the_live_projections_do(
    fresh_database, store_ledger, store_use_cases, clock, addresses, lanes_in
):
    worker = ProjectionWorker(fresh_database, PROJECTIONS, retry_seconds=0.2)
    live = lanes_in("read")
    worker.start()
    try:
        assert worker.running.wait(15), "a projection did not start"
        populate(store_use_cases, clock, addresses)
        trade_with_callbacks(store_use_cases, clock, addresses)
        adjust_each_partners_reserves(store_use_cases)
        head = store_ledger.recorder.max_notification_id()
        assert all(caught_up(lane.view, head) for lane in live)
    finally:
        worker.stop()
    rebuilt = lanes_in("one_pass")
    replay_all(store_ledger, rebuilt, batch=7)  # pages that split transactions and customers' lives

    assert [lane.position for lane in rebuilt] == [head] * len(PROJECTIONS)
    assert [lane.view.position() for lane in rebuilt] == [head] * len(PROJECTIONS)
    assert every_table(rebuilt) == every_table(live)
    assert tables(rebuilt[-1].view)["callback_outbox"], "no delivery was rebuilt"
    postings = tables(rebuilt[PROJECTIONS.index(by_name("Postings"))].view)
    assert sorted(row[:3] for row in postings["reserve_places"]) == [
        ("demo", "cold-1", "ColdStore"),
        ("other", "cold-1", "Exchange"),
    ]
    assert {row[0] for row in postings["balances"]} == {"demo", "other"}  # each partner's own books


def caught_up(view: ReadModel, head: int, timeout: float = 30) -> bool:
    deadline = time.monotonic() + timeout
    while view.position() < head:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def test_one_pass_writes_the_same_tables_in_pages_of_one_three_and_five_thousand_events(
    head, store_ledger, lanes_in, monkeypatch
):
    applied_alone = []  # pages a projection had to apply again on its own, event by event, after a failure
    monkeypatch.setattr(rebuild, "apply_alone", lambda lane, *_: applied_alone.append(lane.spec.name))
    results = []
    for page in (1, 3, 5000):
        lanes = lanes_in(f"page_{page}")
        replay_all(store_ledger, lanes, batch=page)
        assert [lane.position for lane in lanes] == [head] * len(PROJECTIONS)
        results.append(every_table(lanes))
    assert applied_alone == []
    assert results[0] == results[1] == results[2]
    assert all(any(rows for rows in projection.values()) for projection in results[0].values())


def test_a_pass_interrupted_midway_resumes_from_each_projections_own_position(head, store_ledger, lanes_in):
    straight = lanes_in("straight")
    replay_all(store_ledger, straight, batch=50)

    replay_all(store_ledger, lanes_in("resumed"), batch=4, stop_at=head // 3)
    replay_all(store_ledger, lanes_in("resumed", ("AuditChain", "Postings")), batch=5, stop_at=2 * head // 3)
    resumed = lanes_in("resumed")  # each lane starts at its view's position
    assert sorted({lane.position for lane in resumed}) == [head // 3, 2 * head // 3]
    replay_all(store_ledger, resumed, batch=6)

    assert [lane.view.position() for lane in resumed] == [head] * len(PROJECTIONS)
    assert every_table(resumed) == every_table(straight)


def test_a_projection_that_cannot_apply_an_event_stops_there_and_the_others_go_on(
    head, store_ledger, lanes_in, monkeypatch
):
    straight = lanes_in("straight")
    replay_all(store_ledger, straight, batch=50)
    postings = by_name("Postings")
    bad = _first_posting_position(straight[PROJECTIONS.index(postings)].view)
    record = Postings.record

    def refuse(self: Postings, tracking: Any, *args: Any, **kwargs: Any) -> None:
        if tracking.notification_id == bad:
            raise RuntimeError("cannot post this one")
        record(self, tracking, *args, **kwargs)

    monkeypatch.setattr(Postings, "record", refuse)
    lanes = lanes_in("failing")
    replay_all(store_ledger, lanes, batch=10)

    failed = lanes[PROJECTIONS.index(postings)]
    assert isinstance(failed.failure, ProjectionFailed)
    assert failed.failure.notification_id == bad
    assert failed.view.position() == failed.position < bad  # every event before it is applied
    assert [lane.view.position() for lane in lanes if lane is not failed] == [head] * (len(PROJECTIONS) - 1)

    monkeypatch.setattr(Postings, "record", record)
    resumed = lanes_in("failing")
    replay_all(store_ledger, resumed, batch=10)
    assert [lane.view.position() for lane in resumed] == [head] * len(PROJECTIONS)
    assert every_table(resumed) == every_table(straight)


def _first_posting_position(view: ReadModel) -> int:
    with view.datastore.transaction(commit=False) as curs:
        statement = SQL("SELECT min(notification_id) AS at FROM {}").format(view.table("postings"))
        return curs.execute(statement).fetchone()["at"]


def test_a_page_applied_again_is_refused_and_changes_nothing(head, store_ledger, lanes_in):
    [lane] = lanes_in("again", ("ReadModels",))
    replay_all(store_ledger, [lane])
    before = tables(lane.view)
    page = store_ledger.recorder.select_notifications(start=1, limit=5)

    with pytest.raises(ProjectionFailed) as refused:
        apply_page(lane.spec, lane.projection, lane.view, page, store_ledger.mapper.to_domain_event)

    assert refused.value.notification_id == page[0].id
    assert lane.view.position() == head
    assert tables(lane.view) == before


def test_projections_rebuild_rebuilds_every_projection_to_the_head_in_one_pass(
    cli_database, head, store_ledger, lanes_in, capsys
):
    read = lanes_in("read")
    replay_all(store_ledger, read, batch=10, stop_at=head // 2)  # stale tables, emptied first

    assert run("projections", "rebuild") == 0

    out = capsys.readouterr().out
    for spec in PROJECTIONS:
        assert f"{spec.name}: rebuilt to position {head}" in out
    reference = lanes_in("reference")
    replay_all(store_ledger, reference, batch=50)
    assert every_table(read) == every_table(reference)


def test_projections_rebuild_leaves_a_projection_running_elsewhere_and_rebuilds_the_others(
    cli_database, head, lanes_in, capsys
):
    postings = by_name("Postings")
    with exclusive(cli_database, postings) as free:
        assert free
        assert run("projections", "rebuild") == 2

    out = capsys.readouterr().out
    assert re.search(r"Postings is running in another process", out)
    assert "Postings: rebuilt" not in out
    for spec in PROJECTIONS:
        if spec is not postings:
            assert f"{spec.name}: rebuilt to position {head}" in out
