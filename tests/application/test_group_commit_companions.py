"""Companions of the group committer: statements on another table that ride in its next transaction, with
the events of that batch or alone (an Idempotency-Key's claim and answer use them)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Sequence
from typing import Any
from uuid import UUID

import psycopg
import pytest
from eventsourcing.application import Application
from eventsourcing.persistence import OperationalError, RecordConflictError

from application.store.binary_arrays import TextArray
from application.store.group_commit import recorder as group_commit
from application.store.group_commit.recorder import GroupCommitRecorder
from application.store.group_commit.types import PendingSave
from application.store.request_writes import BatchedRow, CompanionRefused, RequestWrites
from tests.application.notes import Note


@pytest.fixture
def notebook(pooled_env: dict[str, str]) -> Iterator[Application[UUID]]:
    app: Application[UUID] = Application(env=pooled_env)
    recorder = recorder_of(app)
    with recorder.datastore.get_connection() as connection:
        connection.execute(f'CREATE TABLE "{recorder.datastore.schema}".words (word text PRIMARY KEY)')
    yield app
    app.close()


def recorder_of(app: Application[UUID]) -> GroupCommitRecorder:
    assert isinstance(app.recorder, GroupCommitRecorder)
    return app.recorder


def words_table(app: Application[UUID]) -> str:
    return f'"{recorder_of(app).datastore.schema}".words'


def insert_words(app: Application[UUID], *words: str) -> tuple[str, tuple[Any, ...]]:
    statement = f"INSERT INTO {words_table(app)} (word) SELECT unnest(%s::text[]) RETURNING word"
    return statement, (TextArray(words),)


def stored_words(app: Application[UUID]) -> list[str]:
    with recorder_of(app).datastore.get_connection() as connection:
        rows = connection.execute(f"SELECT word FROM {words_table(app)} ORDER BY word").fetchall()
    return [row["word"] for row in rows]


def pending_companion(*statements: tuple[str, tuple[Any, ...]]) -> PendingSave:
    """A companion as `write_along` queues it, without the event loop that would await it."""
    return PendingSave((), statements=list(statements))


def test_a_companion_alone_commits_its_statements_and_gives_back_each_ones_rows(notebook):
    count = (f"SELECT count(*) FROM {words_table(notebook)}", ())

    async def write() -> list[Any]:
        return await recorder_of(notebook).write_along([insert_words(notebook, "alpha", "beta"), count])

    assert asyncio.run(write()) == [[("alpha",), ("beta",)], [(2,)]]
    assert stored_words(notebook) == ["alpha", "beta"]


def test_a_companion_shares_the_transaction_of_the_events_in_its_batch(notebook):
    note = Note("saved with a companion")
    events = [notebook.mapper.to_stored_event(event) for event in note.collect_events()]
    batch = [PendingSave(events), pending_companion(insert_words(notebook, "gamma"))]
    recorder = recorder_of(notebook)
    before = recorder.batches_committed
    recorder.commit_batch(batch)
    assert recorder.batches_committed == before + 1
    assert [save.error for save in batch] == [None, None]
    assert batch[1].rows == [[("gamma",)]]
    assert stored_words(notebook) == ["gamma"]
    assert notebook.repository.get(note.id).text == "saved with a companion"


def test_a_companion_the_database_refuses_fails_alone_and_the_events_of_its_batch_land(notebook):
    recorder_of(notebook).commit_batch([pending_companion(insert_words(notebook, "delta"))])
    note = Note("lands beside a refused companion")
    events = [notebook.mapper.to_stored_event(event) for event in note.collect_events()]
    duplicate = pending_companion(insert_words(notebook, "delta"))
    fresh = pending_companion(insert_words(notebook, "epsilon"))
    batch = [duplicate, PendingSave(events), fresh]
    recorder_of(notebook).commit_batch(batch)
    assert isinstance(duplicate.error, psycopg.errors.UniqueViolation)  # psycopg's: the caller splits on it
    assert batch[1].error is None and fresh.error is None
    assert stored_words(notebook) == ["delta", "epsilon"]
    assert notebook.repository.get(note.id).text == "lands beside a refused companion"


def test_a_companion_whose_connection_was_lost_after_commit_fails_as_one_that_may_have_run(
    notebook, monkeypatch
):
    original = GroupCommitRecorder._write_together

    def lost_after_commit(self: GroupCommitRecorder, conn: Any, batch: list[PendingSave]) -> Any:
        original(self, conn, batch)
        raise psycopg.OperationalError("server closed the connection unexpectedly")

    monkeypatch.setattr(GroupCommitRecorder, "_write_together", lost_after_commit)
    save = pending_companion(insert_words(notebook, "zeta"))
    recorder_of(notebook).commit_batch([save])
    assert isinstance(save.error, OperationalError)
    assert save.ambiguous
    assert stored_words(notebook) == ["zeta"]  # it did run: its caller cannot know, and must not assume not


def test_a_companion_whose_committer_does_not_return_fails_within_the_wait_limit(notebook, monkeypatch):
    monkeypatch.setattr(group_commit, "SAVE_WAIT_LIMIT", 0.3)
    monkeypatch.setattr(GroupCommitRecorder, "commit_batch", lambda self, batch: None)  # never settles

    async def write() -> Any:
        return await recorder_of(notebook).write_along([insert_words(notebook, "eta")])

    with pytest.raises(OperationalError, match=r"within 0\.3 s"):
        asyncio.run(write())


def test_statements_for_the_first_save_ride_with_it_and_only_with_it(notebook):
    first, second = Note("first"), Note("second")
    unit = RequestWrites("demo")
    holder = unit.ride_with_first_save([insert_words(notebook, "theta")])
    notebook.save(first, unit=unit)
    notebook.save(second, unit=unit)
    assert holder.rows == [[("theta",)]] and holder.refused is None
    assert stored_words(notebook) == ["theta"]
    assert [notebook.repository.get(note.id).text for note in (first, second)] == ["first", "second"]


def test_a_save_whose_statements_are_refused_writes_none_of_its_events(notebook):
    recorder_of(notebook).commit_batch([pending_companion(insert_words(notebook, "iota"))])
    refused_note, neighbour = Note("refused with its statements"), Note("a neighbour in its batch")
    refused = PendingSave(
        [notebook.mapper.to_stored_event(event) for event in refused_note.collect_events()],
        statements=[insert_words(notebook, "iota")],
    )
    landed = PendingSave([notebook.mapper.to_stored_event(event) for event in neighbour.collect_events()])
    recorder_of(notebook).commit_batch([refused, landed])
    assert isinstance(refused.error, CompanionRefused)
    assert isinstance(refused.error.__cause__, psycopg.errors.UniqueViolation)
    assert landed.error is None
    assert notebook.recorder.select_events(refused_note.id) == []
    assert notebook.repository.get(neighbour.id).text == "a neighbour in its batch"


def test_a_save_refused_for_its_statements_fails_its_use_case_at_once(notebook):
    recorder_of(notebook).commit_batch([pending_companion(insert_words(notebook, "kappa"))])
    unit = RequestWrites("demo")
    holder = unit.ride_with_first_save([insert_words(notebook, "kappa")])
    with pytest.raises(CompanionRefused):
        notebook.save(Note("never written"), unit=unit)
    assert holder.refused is not None and holder.rows is None


def test_statements_of_a_save_that_lost_a_version_race_wait_for_the_next_save(notebook):
    stored = Note("stored")
    notebook.save(stored)
    stale, winner = notebook.repository.get(stored.id), notebook.repository.get(stored.id)
    winner.amend("winner")
    notebook.save(winner)
    stale.amend("stale")
    unit = RequestWrites("demo")
    holder = unit.ride_with_first_save([insert_words(notebook, "lambda")])
    with pytest.raises(RecordConflictError):
        notebook.save(stale, unit=unit)
    assert holder.rows is None and stored_words(notebook) == []
    notebook.save(Note("the retry's save"), unit=unit)
    assert holder.rows == [[("lambda",)]]


class WordRows:
    """A statement whose rows several saves' `BatchedRow`s share: it inserts the words and answers each with
    its position; counts the statements built."""

    def __init__(self, app: Application[UUID]) -> None:
        self.statement = (
            f"WITH new AS (INSERT INTO {words_table(app)} (word) SELECT unnest(%s::text[]) RETURNING word)"
            " SELECT r.n, upper(new.word) FROM new"
            " JOIN unnest(%s::text[]) WITH ORDINALITY AS r (word, n) USING (word)"
        )
        self.built: list[list[str]] = []

    def arrays(self, rows: Sequence[tuple[Any, ...]]) -> tuple[TextArray, TextArray]:
        words = [word for (word,) in rows]
        self.built.append(words)
        return TextArray(words), TextArray(words)

    def row(self, word: str) -> BatchedRow:
        return BatchedRow(self.statement, (word,), self.arrays)


def saving_note(app: Application[UUID], text: str, *statements: Any) -> PendingSave:
    note = Note(text)
    return PendingSave([app.mapper.to_stored_event(e) for e in note.collect_events()], statements=statements)


def test_the_batched_rows_of_several_saves_go_as_one_statement_and_each_save_gets_its_own_rows(notebook):
    words = WordRows(notebook)
    saves = [
        saving_note(notebook, "one", words.row("omicron")),
        saving_note(notebook, "two", insert_words(notebook, "pi"), words.row("rho")),
        saving_note(notebook, "three"),
        saving_note(notebook, "four", words.row("sigma")),
    ]
    recorder_of(notebook).commit_batch(saves)
    assert words.built == [["omicron", "rho", "sigma"]]
    assert [save.error for save in saves] == [None] * 4
    assert [save.rows for save in saves] == [[[("OMICRON",)]], [[("pi",)], [("RHO",)]], [], [[("SIGMA",)]]]
    assert stored_words(notebook) == ["omicron", "pi", "rho", "sigma"]


def test_a_batched_row_the_database_refuses_fails_its_own_save_alone(notebook):
    recorder_of(notebook).commit_batch([pending_companion(insert_words(notebook, "tau"))])
    words = WordRows(notebook)
    landed, refused, also_landed = (
        saving_note(notebook, "upsilon", words.row("upsilon")),
        saving_note(notebook, "tau again", words.row("tau")),
        saving_note(notebook, "phi", words.row("phi")),
    )
    recorder_of(notebook).commit_batch([landed, refused, also_landed])
    assert isinstance(refused.error, CompanionRefused)
    assert isinstance(refused.error.__cause__, psycopg.errors.UniqueViolation)
    assert (landed.rows, also_landed.rows) == ([[("UPSILON",)]], [[("PHI",)]])
    assert stored_words(notebook) == ["phi", "tau", "upsilon"]
    assert notebook.recorder.select_events(refused.events[0].originator_id) == []
