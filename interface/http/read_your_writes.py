"""Read-your-writes by position: a read waits only until the read models have passed its partner's last
write, not for the whole event log.

Around each POST and PUT of an authenticated partner, `ReadYourWritesMiddleware` opens the request's
`UnitOfWork` (`application/store/unit_of_work.py`) in the ASGI scope's state (`open_unit_of_work`), where the
route finds it (`unit_of`, both in `interface/http/common.py`) and hands it to the use case; the use case's
saves raise its position to the last notification id they recorded. Before the answer leaves, that position
is kept in `api.write_positions`, one row per partner, so every worker and replica sees it: by the group
committer in the transaction of the events themselves (`WritePositions.kept_with_events`), or else by the
middleware, in a statement of its own. Every read of a read model then waits, boundedly, until the read
model has processed that position (`holds_write`, the one way the reads of transactions and of reserves
wait); a partner that has written nothing waits for nothing, and an answer a read model cannot give
completely yet is refused (`read_model_behind`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from litestar.enums import ScopeType
from litestar.middleware import ASGIMiddleware
from litestar.types import ASGIApp, Message, Receive, Scope, Send
from psycopg import Connection, sql
from psycopg.rows import tuple_row
from psycopg_pool import AsyncConnectionPool, ConnectionPool

from interface.http.common import open_unit_of_work
from interface.http.problems import ApiProblem

log = logging.getLogger("broker_ledger.reading")
POOL_WAIT_SECONDS = 3
TABLE = "write_positions"
CREATE_LOCK = 7_346_219_001  # the advisory lock workers take in turn to create the table
RETRY_BEHIND_SECONDS = 2  # Retry-After of an answer refused while its read model catches up
RETRY_FAILING_SECONDS = 30  # ... while its projection fails (it retries after at most 30 s)


class WritePositions:
    """Each partner's last written notification id (an unlogged table: after a crash of PostgreSQL it is
    empty, and reads wait for nothing until the partner writes again, as the projections are then caught up
    by the time anyone reads)."""

    def __init__(self, pool: ConnectionPool, async_pool: AsyncConnectionPool, schema: str) -> None:
        self.pool = pool
        self.async_pool = async_pool
        self.schema = schema
        table = sql.Identifier(schema, TABLE)
        self._remember = sql.SQL(
            "INSERT INTO {t} AS t (partner, position) VALUES (%s, %s) ON CONFLICT (partner)"
            " DO UPDATE SET position = greatest(t.position, excluded.position)"
        ).format(t=table)
        self._last = sql.SQL("SELECT position FROM {t} WHERE partner = %s").format(t=table)
        self._create = sql.SQL(
            "CREATE UNLOGGED TABLE IF NOT EXISTS {t} (partner text PRIMARY KEY, position bigint NOT NULL)"
        ).format(t=table)

    def kept_with_events(self, recorder: Any) -> None:
        """Has the event store's group committer keep the positions with the events it writes (the library's
        recorder cannot: then the middleware keeps them)."""
        keep = getattr(recorder, "keep_write_positions", None)
        if keep is not None:
            keep(self.schema, TABLE)

    def create_table(self) -> None:
        with self.pool.connection(timeout=POOL_WAIT_SECONDS) as conn, conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (CREATE_LOCK,))
            conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(self.schema)))
            found = conn.execute("SELECT to_regclass(%s)", [f"{self.schema}.{TABLE}"]).fetchone()
            if found is None or found[0] is None:
                conn.execute(self._create)

    async def remember(self, partner: str, position: int) -> None:
        async with self.async_pool.connection(timeout=POOL_WAIT_SECONDS) as conn:
            await conn.execute(self._remember, (partner, position))

    def last(self, conn: Connection, partner: str) -> int:
        """The partner's last written position (0 if it has written nothing), on the caller's connection."""
        with conn.cursor(row_factory=tuple_row) as cursor:
            row = cursor.execute(self._last, (partner,)).fetchone()
        return int(row[0]) if row else 0


class ReadYourWritesMiddleware(ASGIMiddleware):
    """Keeps the position of a partner's write before its answer is sent (so a read sent after the answer
    waits for it)."""

    scopes = (ScopeType.HTTP,)

    async def handle(self, scope: Scope, receive: Receive, send: Send, next_app: ASGIApp) -> None:
        principal = scope.get("user")
        if scope["method"] not in ("POST", "PUT") or principal is None:
            await next_app(scope, receive, send)
            return
        positions: WritePositions = scope["litestar_app"].state.write_positions
        unit = open_unit_of_work(scope, principal.partner)

        async def send_once_kept(message: Message) -> None:
            if message["type"] == "http.response.start" and unit.left_to_keep:
                await _keep(positions, principal.partner, unit.position)
            await send(message)

        await next_app(scope, receive, send_once_kept)


async def _keep(positions: WritePositions, partner: str, position: int) -> None:
    """The write happened whatever becomes of this: a failure only means a later read may not wait for it."""
    try:
        await positions.remember(partner, position)
    except Exception as error:
        log.warning("could not keep the write position %d of %s: %s", position, partner, error)


# --- the read side: a read model holds the caller's last write, or the answer waits ---


def holds_write(
    written: int, reached: Callable[[int, float], bool], failing: Callable[[], bool], wait_seconds: float
) -> bool:
    """Whether a view holds a partner's last write (`written`, 0 for none): at once if it has reached it
    (`reached(position, seconds)` waits that long at most); else, unless its projection has a recorded
    failure (it will not catch up meanwhile), once it reaches it within `wait_seconds`."""
    if written == 0 or reached(written, 0.0):
        return True
    return not failing() and reached(written, wait_seconds)


def read_model_behind(failing: bool, projection: str = "read models", what: str = "the list") -> ApiProblem:
    """503 for an answer (a list, the reserves) that a projection cannot give completely yet."""
    why = "fails on an event (see GET /health)" if failing else "is catching up"
    detail = (
        f"the {projection} do not show this client's latest writes yet: their projection {why}; {what} "
        "would miss them. Retry after the time in Retry-After (a transaction by its code is served meanwhile)"
    )
    retry = RETRY_FAILING_SECONDS if failing else RETRY_BEHIND_SECONDS
    return ApiProblem(503, "read_model_behind", detail, headers={"Retry-After": str(retry)})
