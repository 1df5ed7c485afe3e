"""`RequestWrites`: what one request writes through the event store, opened by the interface and joined by the
store. It is no unit of work in the usual sense (no transaction boundary: each save of the request commits on
its own); it carries what must follow the request's saves.

The interface opens one around each write of an authenticated partner (`interface.http.read_your_writes`)
and hands it to the use case, which passes it to every save it makes (`LedgerStore.save(..., unit=writes)`);
the group committer (`application.store.group_commit`) takes it with the save's events. It carries:
- whose request it is (`partner`), and who made it (`actor`: recorded with each of its events,
  `application.store.actors`);
- how far the event log went with the request's writes (`position`, for read-your-writes: a later read of the
  same partner waits for it rather than for the whole log), and how far of it the store kept with the events
  (`kept`). The group committer, once told the table (`keep_write_positions`), writes the partner's position
  in the same transaction as its events and marks it kept; whatever a save leaves unkept (the library's
  recorder, a save settled after a connection fault) the interface keeps itself before the answer leaves
  (`left_to_keep`);
- statements that ride with the request's first save (`ride_with_first_save`: an Idempotency-Key's claim).
  They are written in that save's transaction, so the save's events and the statements commit together or
  not at all; a save that lost a version race leaves them for the rerun's save, and a save the database
  refused for them fails with `CompanionRefused`.

A use case run without a request (the expiry sweeper, the command line, tests) passes none: its writes are
tracked by nobody and carry no statements.

The statements that ride in the committer's transactions (`Statement`, `BatchedRow`, their `Rows`,
`CompanionRefused`) are
named here, with the request that hands them over, so that this module imports nothing of ours and the group
commit (`application.store.group_commit`) depends on it, not the other way.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

Statement = tuple[str, Sequence[Any]]  # SQL text and its parameters (sent in binary)
Rows = list[tuple[Any, ...]]


@dataclass(frozen=True, slots=True)
class BatchedRow:
    """One row of a statement that the group committer sends once for every save of its batch that carries a
    row of it (an Idempotency-Key's claim: a batch of five keyed buys sends one claim, not five).
    `statement` takes its rows as columns, `arrays(rows)` being its parameters, and returns first, in each
    row it answers with, the 1-based position (among the rows) of the row answered; a save gets the rows
    answering its own, without that position."""

    statement: str
    row: tuple[Any, ...]
    arrays: Callable[[Sequence[tuple[Any, ...]]], Sequence[Any]]


Riding = Statement | BatchedRow  # what rides with a request's first save


class CompanionRefused(Exception):
    """The database refused the statements that rode with a save (its `__cause__`, psycopg's error): the
    save's events were not written either."""


class SettledSave(Protocol):
    """What a save that carried a request's first-save statements tells of them once settled (the group
    committer's `PendingSave`)."""

    error: BaseException | None
    rows: list[Rows]


class FirstSaveStatements:
    """Statements for the first save of a request, and what became of them: the rows each returned once a
    save carrying them committed, or the refusal (`CompanionRefused`) of the save that carried them. A save
    that failed otherwise (a version conflict, a lost connection) leaves them for the request's next save."""

    __slots__ = ("refused", "rows", "statements", "unknown")

    def __init__(self, statements: Sequence[Riding]) -> None:
        self.statements = statements
        self.rows: list[Rows] | None = None
        self.refused: CompanionRefused | None = None
        self.unknown = False  # carried by a save found committed after a connection fault: rows not known

    @property
    def settled(self) -> bool:
        return self.rows is not None or self.refused is not None or self.unknown

    def after(self, save: SettledSave) -> None:
        """Notes the outcome of a save that carried the statements. A save that succeeded without their rows
        (read back after a connection fault: its events were found, so its statements committed with them,
        but what they returned is not known) settles them as `unknown`: they ride with no later save."""
        if save.error is None and len(save.rows) == len(self.statements):
            self.rows = save.rows
        elif save.error is None:
            self.unknown = True
        elif isinstance(save.error, CompanionRefused):
            self.refused = save.error


class RequestWrites:
    """The writes of one request of `partner` through the event store: its write position and the statements
    riding with its first save (see the module docstring). `partner` None: the position is tracked but kept
    by nobody."""

    __slots__ = ("actor", "first_save", "kept", "partner", "position")

    def __init__(self, partner: str | None = None, actor: Mapping[str, str] | None = None) -> None:
        self.partner = partner
        self.actor = actor  # who the request's events are by (`application.store.actors`); None: the process
        self.position = 0  # the last notification id the request's saves recorded; 0 while it wrote nothing
        self.kept = 0  # how far of it the store kept with the events (committed)
        self.first_save: FirstSaveStatements | None = None

    @property
    def left_to_keep(self) -> bool:
        """True when the request wrote past what the store kept: the interface must keep the position."""
        return self.position > self.kept

    def note_kept(self, notification_id: int) -> None:
        """The store wrote this partner's position up to `notification_id` with the events (committed)."""
        if notification_id > self.kept:
            self.kept = notification_id

    def note_recorded(self, recordings: Sequence[Any]) -> None:
        """Raises the position to the last of `recordings` (eventsourcing's Recording) of a save."""
        if not recordings:
            return
        last = max(recording.notification.id for recording in recordings)
        if last > self.position:
            self.position = last

    def note_written_beside(self, other: RequestWrites) -> None:
        """Raises the position to what `other`, the writes of the same request's partner that carried none
        of its riding statements, wrote: so a later read of the partner waits for that write too."""
        if other.position > self.position:
            self.position = other.position

    def ride_with_first_save(self, statements: Sequence[Riding]) -> FirstSaveStatements:
        """Has `statements` ride with the first save of this request that commits; what became of them is on
        the holder returned."""
        self.first_save = FirstSaveStatements(statements)
        return self.first_save

    def statements_for_next_save(self) -> FirstSaveStatements | None:
        """The statements waiting for the request's first save, None when there are none or they are settled
        (committed with a save, or refused)."""
        waiting = self.first_save
        return waiting if waiting is not None and not waiting.settled else None
