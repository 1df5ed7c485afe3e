"""The group-commit recorder under faults: a held lock, a save with bad data, a connection lost around COMMIT,
and a committer that does not come back. Each ends in an answer within a bound, and only the save at fault
fails."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any
from uuid import UUID

import psycopg
import pytest
from eventsourcing.application import Application
from eventsourcing.persistence import DataError, OperationalError, StoredEvent

from application.store.group_commit import recorder as group_commit
from application.store.group_commit.recorder import GroupCommitRecorder
from application.store.group_commit.types import PendingSave
from tests.application.notes import Note

SHORT_LOCK_TIMEOUT = 0.5


@pytest.fixture
def notebook(pooled_env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> Iterator[Application[UUID]]:
    monkeypatch.setattr(group_commit, "LOCK_TIMEOUT", SHORT_LOCK_TIMEOUT)
    app: Application[UUID] = Application(env=pooled_env)
    yield app
    app.close()


def recorder_of(app: Application[UUID]) -> GroupCommitRecorder:
    assert isinstance(app.recorder, GroupCommitRecorder)
    return app.recorder


def pending(app: Application[UUID], note: Note) -> PendingSave:
    return PendingSave([app.mapper.to_stored_event(event) for event in note.collect_events()])


def stored_texts(app: Application[UUID], *notes: Note) -> list[str | None]:
    texts = []
    for note in notes:
        events = app.recorder.select_events(note.id)
        texts.append(app.repository.get(note.id).text if events else None)
    return texts


def hold_events_table_lock(app: Application[UUID], url: str) -> psycopg.Connection[Any]:
    """Another client's transaction holding the lock every save needs, until it is closed."""
    recorder = recorder_of(app)
    holder = psycopg.connect(url)
    holder.execute(recorder.lock_statement)
    return holder


def url_of(env: dict[str, str]) -> str:
    return (
        f"host={env['POSTGRES_HOST']} port={env['POSTGRES_PORT']} dbname={env['POSTGRES_DBNAME']}"
        f" user={env['POSTGRES_USER']} password={env['POSTGRES_PASSWORD']}"
    )


def test_a_save_behind_a_held_lock_fails_within_the_lock_timeout_and_writes_nothing(notebook, pooled_env):
    holder = hold_events_table_lock(notebook, url_of(pooled_env))
    note = Note("blocked")
    started = time.monotonic()
    try:
        with pytest.raises(OperationalError, match="lock"):
            notebook.save(note)
    finally:
        holder.close()
    # one try and one retry, each bounded by the lock timeout
    assert time.monotonic() - started < 4 * SHORT_LOCK_TIMEOUT + 1.0
    assert stored_texts(notebook, note) == [None]
    notebook.save(Note("after the lock is released"))


def test_a_save_with_data_the_database_refuses_fails_alone_and_its_batch_neighbours_land(notebook):
    before, bad, after = Note("before"), Note("bad"), Note("after")
    batch = [pending(notebook, before), pending(notebook, bad), pending(notebook, after)]
    broken = batch[1].events[0]
    nul_topic = StoredEvent(broken.originator_id, broken.originator_version, "no\x00topic", broken.state)
    batch[1].events = [nul_topic]
    recorder_of(notebook).commit_batch(batch)
    assert batch[0].error is None and batch[2].error is None
    assert isinstance(batch[1].error, DataError)
    assert stored_texts(notebook, before, bad, after) == ["before", None, "after"]


def lose_connection(when: str) -> Callable[..., list[int]]:
    """A `_write_together` whose connection is lost before the batch is sent or after its COMMIT."""
    original = GroupCommitRecorder._write_together

    def write(self: GroupCommitRecorder, conn: Any, batch: list[PendingSave]) -> list[int]:
        if when == "after commit":
            original(self, conn, batch)
        raise psycopg.OperationalError("server closed the connection unexpectedly")

    return write


def test_a_batch_whose_commit_landed_before_the_connection_was_lost_succeeds_with_its_ids(
    notebook, monkeypatch
):
    monkeypatch.setattr(GroupCommitRecorder, "_write_together", lose_connection("after commit"))
    first, second = Note("first"), Note("second")
    batch = [pending(notebook, first), pending(notebook, second)]
    recorder_of(notebook).commit_batch(batch)
    assert [save.error for save in batch] == [None, None]
    stored = notebook.recorder.select_notifications(start=1, limit=100)
    assert [n.id for n in stored] == batch[0].notification_ids + batch[1].notification_ids
    assert stored_texts(notebook, first, second) == ["first", "second"]


def test_a_batch_lost_before_its_commit_fails_as_not_written_and_its_save_is_retried(notebook, monkeypatch):
    monkeypatch.setattr(GroupCommitRecorder, "_write_together", lose_connection("before commit"))
    note = Note("lost")
    batch = [pending(notebook, note)]
    recorder_of(notebook).commit_batch(batch)
    assert isinstance(batch[0].error, OperationalError)
    assert batch[0].ambiguous is False
    assert stored_texts(notebook, note) == [None]
    monkeypatch.undo()


def test_a_connection_killed_while_waiting_for_the_lock_is_retried_and_the_save_lands_once(
    notebook, pooled_env
):
    url = url_of(pooled_env)
    holder = hold_events_table_lock(notebook, url)
    note = Note("survivor")
    outcome: list[BaseException | None] = []

    def save() -> None:
        try:
            notebook.save(note)
            outcome.append(None)
        except BaseException as error:
            outcome.append(error)

    saver = threading.Thread(target=save)
    saver.start()
    with psycopg.connect(url, autocommit=True) as admin:
        waiting = wait_for_lock_waiter(admin)
        admin.execute("SELECT pg_terminate_backend(%s)", [waiting])
    holder.close()
    saver.join(timeout=10)
    assert outcome == [None]
    assert len(notebook.recorder.select_events(note.id)) == 1


def wait_for_lock_waiter(admin: psycopg.Connection[Any]) -> int:
    for _ in range(100):
        row = admin.execute(
            "SELECT pid FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
            " AND (query LIKE 'LOCK TABLE%%' OR query LIKE '%%\\_append\\_%%')"  # the committer's append
        ).fetchone()
        if row:
            return int(row[0])
        time.sleep(0.02)
    raise AssertionError("no save waited for the events table's lock")


def test_a_request_waits_a_bounded_time_for_a_committer_that_does_not_return(notebook, monkeypatch):
    monkeypatch.setattr(group_commit, "SAVE_WAIT_LIMIT", 0.3)
    stuck = threading.Event()
    monkeypatch.setattr(GroupCommitRecorder, "commit_batch", lambda self, batch: stuck.wait(5))
    started = time.monotonic()
    with pytest.raises(OperationalError, match="did not confirm"):
        notebook.save(Note("in flight"))
    with pytest.raises(OperationalError, match="did not take"):
        notebook.save(Note("queued behind it"))
    stuck.set()
    assert time.monotonic() - started < 2.0
