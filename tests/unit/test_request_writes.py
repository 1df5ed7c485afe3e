"""A request's writes (`RequestWrites`) and a use case's read-ahead are objects handed from hand to hand, not
context variables: what each promises, in memory."""

from __future__ import annotations

import uuid
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from application.store.aggregates import ReadAhead
from application.store.group_commit.types import PendingSave
from application.store.request_writes import CompanionRefused, RequestWrites

ROOT = Path(__file__).resolve().parents[2]
CLAIM = ("SELECT claim()", ())


def recorded(*notification_ids: int) -> list[Any]:
    """Recordings as eventsourcing's save returns them, with only what a request's writes read."""
    return [SimpleNamespace(notification=SimpleNamespace(id=i)) for i in notification_ids]


def test_no_context_variable_carries_a_requests_work() -> None:
    found = [
        path.relative_to(ROOT).as_posix()
        for package in ("domain", "application", "interface", "projections")
        for path in (ROOT / package).rglob("*.py")
        if "ContextVar" in path.read_text(encoding="utf-8")
    ]
    assert found == []


def test_a_requests_write_position_rises_to_its_last_recording_and_never_goes_back() -> None:
    unit = RequestWrites("demo")
    unit.note_recorded(recorded(7, 9, 8))
    unit.note_recorded(recorded(5))
    unit.note_recorded([])
    assert unit.position == 9 and unit.left_to_keep
    unit.note_kept(9)
    unit.note_kept(3)
    assert unit.kept == 9 and not unit.left_to_keep


def test_statements_wait_for_the_first_save_until_one_commits_them() -> None:
    unit = RequestWrites("demo")
    assert unit.statements_for_next_save() is None
    claim = unit.ride_with_first_save([CLAIM])
    lost = PendingSave((), unit, statements=claim.statements)
    lost.fail(RuntimeError("a version race"))
    claim.after(lost)
    assert unit.statements_for_next_save() is claim
    landed = PendingSave((), unit, statements=claim.statements)
    landed.rows = [[("2026-01-01",)]]
    landed.succeed([11])
    claim.after(landed)
    assert claim.rows == [[("2026-01-01",)]] and unit.statements_for_next_save() is None


def test_statements_of_a_save_found_committed_after_a_lost_connection_are_settled_as_unknown() -> None:
    unit = RequestWrites("demo")
    claim = unit.ride_with_first_save([CLAIM])
    read_back = PendingSave((), unit, statements=claim.statements)
    read_back.succeed([12])  # its events were found; the statements' rows were lost with the connection
    claim.after(read_back)
    assert claim.unknown and claim.rows is None and claim.refused is None
    assert unit.statements_for_next_save() is None


def test_statements_refused_with_a_save_ride_with_no_other() -> None:
    unit = RequestWrites("demo")
    claim = unit.ride_with_first_save([CLAIM])
    refused = PendingSave((), unit, statements=claim.statements)
    refused.fail(CompanionRefused("the key is another request's"))
    claim.after(refused)
    assert claim.refused is not None and claim.rows is None
    assert unit.statements_for_next_save() is None


def test_a_save_keeps_the_position_of_a_partners_request_only() -> None:
    assert PendingSave((), RequestWrites("demo")).unit is not None
    assert PendingSave((), RequestWrites()).unit is None
    assert PendingSave(()).unit is None


class Store:
    """A store that reads every aggregate now, as its id."""

    def find(self, aggregate_id: uuid.UUID) -> Any:
        return ("read now", aggregate_id)

    def latest_event(self, aggregate_id: uuid.UUID) -> Any:
        return ("latest read now", aggregate_id)


def test_a_read_ahead_answers_from_what_it_read_and_from_the_store_once_its_block_is_left() -> None:
    read, latest, other = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    event = SimpleNamespace(mutate=lambda _: "rebuilt from what was read")
    with ReadAhead(Store(), {read: [event]}, {latest: "its latest event"}) as loaded:  # type: ignore[arg-type]
        assert loaded.find(read) == "rebuilt from what was read"
        assert loaded.latest_event(latest) == "its latest event"
        assert loaded.find(other) == ("read now", other)
    assert loaded.find(read) == ("read now", read)
    assert loaded.latest_event(latest) == ("latest read now", latest)
