"""The group-commit recorder: concurrent saves share transactions without losing what the library promises."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from uuid import UUID

import pytest
from eventsourcing.application import Application
from eventsourcing.domain import Aggregate
from eventsourcing.persistence import IntegrityError, RecordConflictError
from prometheus_client import REGISTRY

from application.store.group_commit.recorder import GroupCommitRecorder
from application.store.group_commit.types import PendingSave
from application.store.request_writes import RequestWrites
from tests.application.notes import Note

WRITERS = 16
SAVES_PER_WRITER = 25


@pytest.fixture
def notebook(pooled_env: dict[str, str]) -> Iterator[Application[UUID]]:
    app: Application[UUID] = Application(env=pooled_env)
    yield app
    app.close()


def pending(app: Application[UUID], *aggregates: Aggregate, partner: str | None = None) -> PendingSave:
    """The save `app.save(*aggregates)` would hand to the committer (within a request of `partner`)."""
    assert isinstance(app.recorder, GroupCommitRecorder)
    events = [app.mapper.to_stored_event(e) for a in aggregates for e in a.collect_events()]
    return PendingSave(events, RequestWrites(partner) if partner else None)


@pytest.fixture
def position_of(notebook: Application[UUID]) -> Callable[[str], int]:
    """A partner's write position, once the notebook's committer keeps them with the events (as it
    does `api.write_positions`) in a table of the test's schema."""
    recorder = notebook.recorder
    schema = recorder.datastore.schema
    with recorder.datastore.get_connection() as connection:
        connection.execute(
            f'CREATE TABLE "{schema}".write_positions (partner text PRIMARY KEY, position bigint NOT NULL)'
        )
    recorder.keep_write_positions(schema, "write_positions")

    def position(partner: str) -> int:
        with recorder.datastore.get_connection() as connection:
            row = connection.execute(
                f'SELECT position FROM "{schema}".write_positions WHERE partner = %s', [partner]
            ).fetchone()
        return row["position"]

    return position


def copy_of(app: Application[UUID], note: Note) -> Note:
    return app.repository.get(note.id)


def test_the_ledger_environment_selects_the_group_commit_recorder(notebook):
    assert isinstance(notebook.recorder, GroupCommitRecorder)


def test_concurrent_saves_share_transactions_and_each_gets_its_own_notification_ids(notebook):
    ids_by_writer: list[list[int]] = [[] for _ in range(WRITERS)]

    def write(writer: int) -> None:
        for i in range(SAVES_PER_WRITER):
            recording = notebook.save(Note(f"{writer}-{i}"))
            ids_by_writer[writer].extend(r.notification.id for r in recording)

    threads = [threading.Thread(target=write, args=(w,)) for w in range(WRITERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    every_id = sorted(i for ids in ids_by_writer for i in ids)
    assert len(every_id) == len(set(every_id)) == WRITERS * SAVES_PER_WRITER
    stored = notebook.recorder.select_notifications(start=1, limit=10_000)
    assert [n.id for n in stored] == every_id
    assert notebook.recorder.batches_committed < WRITERS * SAVES_PER_WRITER


def stored_and_stale(notebook: Application[UUID]) -> tuple[Note, Note]:
    """A stored note amended to "winner", and a copy of it from before, amended to "stale" (its save
    conflicts with the stored version)."""
    stored = Note("stored")
    notebook.save(stored)
    stale = copy_of(notebook, stored)
    notebook.save(copy_of_amended(notebook, stored, "winner"))
    stale.amend("stale")
    return stored, stale


def rivals(notebook: Application[UUID], stored: Note) -> tuple[Note, Note]:
    """Two copies of `stored` amended to "first" and "second": the same next version."""
    first, second = copy_of(notebook, stored), copy_of(notebook, stored)
    first.amend("first")
    second.amend("second")
    return first, second


def test_a_version_conflict_with_the_store_fails_only_the_save_it_belongs_to(notebook):
    stored, stale = stored_and_stale(notebook)
    before, after = Note("before"), Note("after")
    batch = [pending(notebook, before), pending(notebook, stale), pending(notebook, after)]
    notebook.recorder.commit_batch(batch)
    assert batch[0].error is None and batch[2].error is None
    assert isinstance(batch[1].error, IntegrityError)
    assert isinstance(batch[1].error, RecordConflictError)
    assert batch[0].notification_ids < batch[2].notification_ids
    assert copy_of(notebook, before).text == "before" and copy_of(notebook, after).text == "after"
    assert copy_of(notebook, stored).text == "winner"


def test_a_conflict_with_an_earlier_save_of_the_same_batch_refuses_only_the_later_one(notebook):
    stored = Note("stored")
    notebook.save(stored)
    first, second = rivals(notebook, stored)
    batch = [pending(notebook, first), pending(notebook, Note("other")), pending(notebook, second)]
    notebook.recorder.commit_batch(batch)
    assert [save.error is None for save in batch] == [True, True, False]
    assert isinstance(batch[2].error, IntegrityError)
    assert copy_of(notebook, stored).text == "first"
    ids = [save.notification_ids for save in batch]
    assert ids[0][0] < ids[1][0]


def one_by_one_batches() -> float:
    return REGISTRY.get_sample_value("broker_ledger_group_commit_one_by_one_total") or 0.0


def test_conflicts_are_refused_before_the_lock_and_the_rest_is_still_written_in_one_transaction(notebook):
    stored, stale = stored_and_stale(notebook)
    first, second = rivals(notebook, stored)
    before, committed = one_by_one_batches(), notebook.recorder.batches_committed
    batch = [
        pending(notebook, stale),
        pending(notebook, first),
        pending(notebook, Note("new")),
        pending(notebook, second),
    ]
    notebook.recorder.commit_batch(batch)
    assert [save.error is None for save in batch] == [False, True, True, False]
    assert all(isinstance(save.error, RecordConflictError) for save in (batch[0], batch[3]))
    assert one_by_one_batches() == before  # not written again save by save, under the lock
    assert notebook.recorder.batches_committed == committed + 1
    assert copy_of(notebook, stored).text == "first"


def test_a_batch_keeps_each_partners_position_no_lower_than_its_last_event(notebook, position_of):
    batch = [
        pending(notebook, Note("a1"), partner="a"),
        pending(notebook, Note("b1"), Note("b2"), partner="b"),
        pending(notebook, Note("a2"), partner="a"),
        pending(notebook, Note("nobody's")),
    ]
    notebook.recorder.commit_batch(batch)
    last = batch[-1].notification_ids[-1]
    assert position_of("a") == position_of("b") == last  # the batch's last event: all visible at one commit
    assert [save.unit.kept for save in batch[:3]] == [save.notification_ids[-1] for save in batch[:3]]


def test_a_position_kept_beside_a_refused_save_points_at_an_event_that_was_written(notebook, position_of):
    stored = Note("stored")
    notebook.save(stored)
    stale = copy_of(notebook, stored)
    notebook.save(copy_of_amended(notebook, stored, "winner"))
    stale.amend("stale")
    written = pending(notebook, Note("written"), partner="a")
    batch = [written, pending(notebook, Note("drew an id"), stale, partner="a")]
    notebook.recorder.commit_batch(batch)
    assert isinstance(batch[1].error, IntegrityError)
    assert position_of("a") == written.notification_ids[-1]  # not the id the refused save drew


def test_a_refused_save_writes_none_of_its_events(notebook):
    stored = Note("stored")
    notebook.save(stored)
    stale = copy_of(notebook, stored)
    notebook.save(copy_of_amended(notebook, stored, "winner"))
    stale.amend("loser")
    fresh = Note("fresh, saved together with the stale amendment")
    batch = [pending(notebook, fresh, stale)]
    notebook.recorder.commit_batch(batch)
    assert isinstance(batch[0].error, IntegrityError)
    assert notebook.recorder.select_events(fresh.id) == []
    assert copy_of(notebook, stored).text == "winner"


def copy_of_amended(app: Application[UUID], note: Note, text: str) -> Note:
    copy = copy_of(app, note)
    copy.amend(text)
    return copy


def test_saves_through_the_application_raise_the_conflict_the_use_cases_retry_on(notebook):
    stored = Note("stored")
    notebook.save(stored)
    stale = copy_of(notebook, stored)
    notebook.save(copy_of_amended(notebook, stored, "winner"))
    stale.amend("loser")
    with pytest.raises(RecordConflictError):
        notebook.save(stale)


def test_saves_are_acknowledged_with_synchronous_commit_on(notebook):
    with notebook.recorder.datastore.get_connection() as connection:
        assert connection.execute("SHOW synchronous_commit").fetchone()["synchronous_commit"] == "on"


def test_a_reader_tailing_the_log_during_concurrent_saves_skips_no_notification(pooled_env):
    """Two recorders stand for two API processes; the reader follows the log as a projection does."""
    writers = [Application(env=pooled_env) for _ in range(2)]
    seen: list[int] = []
    done = threading.Event()

    def tail() -> None:
        last = 0
        while True:
            finished = done.is_set()
            for notification in writers[0].recorder.select_notifications(start=last + 1, limit=500):
                seen.append(notification.id)
                last = notification.id
            if finished:
                return

    def write(app: Application[UUID]) -> None:
        for i in range(SAVES_PER_WRITER):
            app.save(Note(str(i)), Note(str(i)))

    reader = threading.Thread(target=tail)
    reader.start()
    threads = [threading.Thread(target=write, args=(writers[i % 2],)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    done.set()
    reader.join()
    for app in writers:
        app.close()
    assert len(seen) == 8 * SAVES_PER_WRITER * 2
    assert seen == sorted(seen)
    assert seen == list(range(seen[0], seen[0] + len(seen)))
