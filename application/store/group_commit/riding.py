"""The statements riding in a batch's transaction (the saves' first-save statements and the companions'),
sent in pipeline mode: each in its order, on a cursor of its own (rows as tuples, parameters in binary),
except the rows of one `BatchedRow` statement, sent together as one statement where the first of them goes.
What comes back for each save is one reader per statement, whose `fetchall()` gives that statement's rows
once the pipeline is left: the statement's cursor, or the save's share of its batched statement's rows.

A batch of five keyed buys so sends one claim of five keys rather than five claims: in pipeline mode each
statement costs the committer an execution, a result to read and a round of the pipeline's communication,
and the server a statement and, for a function, its call.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from psycopg import Connection
from psycopg.rows import tuple_row

from application.store.request_writes import BatchedRow, Riding, Rows


class _Together:
    """The rows of a statement sent once for several `BatchedRow`s, by the position of the row answered."""

    __slots__ = ("_by_position", "cursor")

    def __init__(self, cursor: Any) -> None:
        self.cursor = cursor
        self._by_position: dict[int, Rows] | None = None

    def rows_of(self, position: int) -> Rows:
        if self._by_position is None:
            self._by_position = defaultdict(list)
            for position_answered, *row in self.cursor.fetchall():
                self._by_position[position_answered].append(tuple(row))
        return self._by_position.get(position, [])


class _Share:
    """One save's rows of a statement sent together: read as a cursor's are."""

    __slots__ = ("position", "together")

    def __init__(self, together: _Together, position: int) -> None:
        self.together = together
        self.position = position

    def fetchall(self) -> Rows:
        return self.together.rows_of(self.position)


def sent(conn: Connection[Any], statements_of_saves: Sequence[Sequence[Riding]]) -> list[list[Any]]:
    """Executes the statements of several saves (`statements_of_saves`, in the batch's order) and returns,
    per save, the reader of each of its statements' rows."""
    rows_of_batched: dict[str, list[tuple[Any, ...]]] = defaultdict(list)
    for statements in statements_of_saves:
        for statement in statements:
            if isinstance(statement, BatchedRow):
                rows_of_batched[statement.statement].append(statement.row)
    together: dict[str, _Together] = {}
    positions: dict[str, int] = defaultdict(int)
    readers = []
    for statements in statements_of_saves:
        of_save: list[Any] = []
        for statement in statements:
            if not isinstance(statement, BatchedRow):
                of_save.append(_executed(conn, *statement))
                continue
            text = statement.statement
            if text not in together:
                together[text] = _Together(_executed(conn, text, statement.arrays(rows_of_batched[text])))
            positions[text] += 1
            of_save.append(_Share(together[text], positions[text]))
        readers.append(of_save)
    return readers


def _executed(conn: Connection[Any], statement: str, parameters: Sequence[Any]) -> Any:
    cursor = conn.cursor(row_factory=tuple_row)
    cursor.execute(statement, parameters, prepare=True, binary=True)
    return cursor
