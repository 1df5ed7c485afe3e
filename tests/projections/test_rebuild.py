"""A read model kept live by a projection worker while the ledger writes equals one rebuilt from the first
event; the `projections` commands rebuild it and report its position."""

from __future__ import annotations

import re

from projections.base.runner import APPLICATION, exclusive, replay
from projections.live import ProjectionWorker
from tests.projections.scenario import READ_MODELS, populate
from tests.projections.support import contents
from tests.projections.support import run_cli as run


def test_a_read_model_rebuilt_from_the_first_event_equals_the_live_one(
    fresh_database, store_ledger, store_use_cases, clock, addresses, make_view
):
    worker = ProjectionWorker(fresh_database, [READ_MODELS], retry_seconds=0.2)
    worker.start()
    try:
        assert worker.running.wait(15), "the worker did not start the projection"
        populate(store_use_cases, clock, addresses)
        live = make_view()
        assert live.caught_up(store_ledger.recorder.max_notification_id(), timeout=30)
    finally:
        worker.stop()
    rebuilt = make_view("rebuild_x")
    replay(store_ledger, READ_MODELS, rebuilt)
    assert rebuilt.position(APPLICATION) == live.position(APPLICATION)
    assert contents(rebuilt) == contents(live)
    assert contents(live)["transactions"]


def test_projections_rebuild_replays_a_read_model_and_status_shows_it_caught_up(
    cli_database, store_ledger, store_use_cases, clock, addresses, make_view, capsys
):
    populate(store_use_cases, clock, addresses)
    head = store_ledger.recorder.max_notification_id()
    stale = make_view()
    replay(store_ledger, READ_MODELS, stale, stop_at=head // 2)

    assert run("projections", "rebuild", "ReadModels") == 0
    assert f"ReadModels: rebuilt to position {head}" in capsys.readouterr().out
    reference = make_view("reference")
    replay(store_ledger, READ_MODELS, reference)
    assert contents(make_view()) == contents(reference)

    assert run("projections", "status") == 0
    line = next(line for line in capsys.readouterr().out.splitlines() if "ReadModels" in line)
    assert re.findall(r"\d+", line) == [str(head), str(head), "0", "0"]  # and 0 s behind


def test_projections_rebuild_refuses_while_the_projection_runs_elsewhere(cli_database, store_ledger, capsys):
    with exclusive(cli_database, READ_MODELS) as free:
        assert free
        assert run("projections", "rebuild", "ReadModels") == 2
    assert "running in another process" in capsys.readouterr().out


def test_projections_rebuild_names_the_known_projections_for_an_unknown_one(cli_database, capsys):
    assert run("projections", "rebuild", "NoSuchModel") == 2
    assert "ReadModels" in capsys.readouterr().out
