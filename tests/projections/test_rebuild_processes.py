"""`projections rebuild --processes N` (`projections.rebuild.rebuild_apart`): the projections split into N
groups, each rebuilt in a process of its own, write the rows of a rebuild in one process; the parent hears of
every projection's progress; one running elsewhere is left as it is, and the others are rebuilt."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from application.ledger import Ledger
from application.use_cases import UseCases
from bench.history import Driver
from projections.base.runner import exclusive
from projections.catalog import PROJECTIONS, by_name
from projections.rebuild import groups, rebuild_apart
from tests.projections.runner_support import NAMES, projection_rows
from tests.projections.scenario import populate
from tests.projections.support import run_cli as run

CALLBACK_URL = "https://hooks.partner.example/broker"


@pytest.fixture
def head(
    cli_database: str, store_ledger: Ledger, store_use_cases: UseCases, clock: Any, addresses: Any
) -> int:
    """The CLI's database with every kind of event, buys with a callback URL among them; its last position."""
    populate(store_use_cases, clock, addresses)
    drive = Driver(store_use_cases, clock, addresses)
    drive.customer("demo", "carol")
    for fiat in ("80", "90"):
        bought = drive.buy("demo", "carol", fiat, callback_url=CALLBACK_URL)
        store_use_cases.buys.commit("demo", bought.code)
        drive.sendout(bought, 2)
    return store_ledger.recorder.max_notification_id()


def test_the_projections_are_split_by_their_index_in_the_catalog():
    assert [[spec.name for spec in group] for group in groups(PROJECTIONS, 2)] == [NAMES[0::2], NAMES[1::2]]
    assert [len(group) for group in groups(PROJECTIONS, 9)] == [1] * len(PROJECTIONS)
    assert groups(PROJECTIONS, 1) == [list(PROJECTIONS)]


def test_a_rebuild_in_two_processes_writes_the_rows_of_a_rebuild_in_one(cli_database, head, capsys):
    assert run("projections", "rebuild", "--processes", "1") == 0
    in_one = projection_rows(cli_database)
    capsys.readouterr()

    assert run("projections", "rebuild", "--processes", "2") == 0

    out = capsys.readouterr().out
    for name in NAMES:
        assert f"{name}: rebuilt to position {head}" in out
    assert projection_rows(cli_database) == in_one
    assert in_one["transactions"] and in_one["callback_outbox"] and in_one["postings"]


def test_the_parent_hears_when_each_projection_starts_and_every_event_it_applies(cli_database, head):
    started: list[str] = []
    applied: Counter[str] = Counter()

    rebuilt, busy = rebuild_apart(
        cli_database,
        PROJECTIONS,
        2,
        starting=started.append,
        progress=lambda name, events: applied.update({name: events}),
    )

    assert sorted(started) == sorted(NAMES) and busy == []
    assert applied == {name: head for name in NAMES}  # the log's ids run from 1 to head
    assert [(done.name, done.position, done.failure) for done in rebuilt] == [
        (name, head, None) for name in NAMES[0::2] + NAMES[1::2]
    ]


def test_a_rebuild_in_two_processes_leaves_a_projection_running_elsewhere(cli_database, head, capsys):
    with exclusive(cli_database, by_name("AuditChain")) as free:
        assert free
        assert run("projections", "rebuild", "--processes", "2") == 2

    out = capsys.readouterr().out
    assert "AuditChain is running in another process; stop it first" in out
    assert "AuditChain: rebuilt" not in out
    for name in set(NAMES) - {"AuditChain"}:
        assert f"{name}: rebuilt to position {head}" in out
