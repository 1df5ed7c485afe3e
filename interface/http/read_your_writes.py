"""Read-your-writes by position: a read waits only until the read models have passed its partner's last
write, not for the whole event log.

Around each POST and PUT of an authenticated partner, `ReadYourWritesMiddleware` opens the request's writes, a
`RequestWrites` (`application/store/request_writes.py`), in the ASGI scope's state (`open_unit_of_work`),
where the route finds it (`unit_of`, both in `interface/http/request_writes.py`) and hands it to the use case;
the use case's saves raise its position to the last notification id they recorded. Before the answer leaves,
that position is kept in `api.write_positions`, one row per partner, so every worker and replica sees it: by
the group committer in the transaction of the events themselves (`WritePositions.kept_with_events`), or else
by the middleware, in a statement of its own. Every read of a read model then waits, boundedly, until the read
model has processed that position (`holds_write`, the one way the reads of transactions and of reserves wait);
a partner that has written nothing waits for nothing, and an answer a read model cannot give completely yet is
refused (`read_model_behind`).

With read servers (BROKER_LEDGER_READ_DATABASE_URL: PostgreSQL standbys), a read goes there first
(`ReadPools`, `holding_last_write`). The partner's last write is still read on the primary: a standby that
lags would show an older one, and the read would not wait for it. A projection writes its rows and its
position in one transaction, so a standby whose position has reached the write has replayed the rows too:
waiting for the view's position there is waiting for the standby's replay. A standby that does not get there
within the wait, or cannot be reached, hands the read to the primary, which gets what is left of the same
bound; the answer is refused only when the primary's view is behind too.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from typing import Any

import psycopg
from litestar.enums import ScopeType
from litestar.middleware import ASGIMiddleware
from litestar.types import ASGIApp, Message, Receive, Scope, Send
from psycopg import Connection, sql
from psycopg.rows import tuple_row
from psycopg_pool import AsyncConnectionPool, ConnectionPool, PoolTimeout

from application.store.faults import PersistenceError
from interface.http.problems import ApiProblem
from interface.http.request_writes import open_unit_of_work

log = logging.getLogger("broker_ledger.reading")
POOL_WAIT_SECONDS = 3
TABLE = "write_positions"
CREATE_LOCK = 7_346_219_001  # the advisory lock workers take in turn to create the table
UNLOGGED = "u"  # pg_class.relpersistence of an unlogged table
RETRY_BEHIND_SECONDS = 2  # Retry-After of an answer refused while its read model catches up
RETRY_FAILING_SECONDS = 30  # ... while its projection fails (it retries after at most 30 s)
READ_SERVER_FAULTS = (psycopg.Error, PoolTimeout, PersistenceError)  # a read server down, or cancelling
ON_READ_SERVERS = "standby"  # how the names of the pools on the read servers begin (pg_stat_activity)


class WritePositions:
    """Each partner's last written notification id, in a logged table, as the events are: replicated to the
    standbys with them, so that after a failover the promoted standby still knows each partner's last write
    and a read waits for it (an unlogged table, as it was until issue 36, is not replicated, and is empty on
    a promoted standby and after a crash). Its row rides in the events' own transaction (the group
    committer's), so being logged adds a few bytes to a commit that is written anyway. A table created
    unlogged by an earlier version is made logged once, by the first process to start."""

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
            "CREATE TABLE IF NOT EXISTS {t} (partner text PRIMARY KEY, position bigint NOT NULL)"
        ).format(t=table)
        self._set_logged = sql.SQL("ALTER TABLE {t} SET LOGGED").format(t=table)

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
            found = conn.execute(
                "SELECT relpersistence FROM pg_class WHERE oid = to_regclass(%s)", [f"{self.schema}.{TABLE}"]
            ).fetchone()
            if found is None:
                conn.execute(self._create)
            elif found[0] == UNLOGGED:
                conn.execute(self._set_logged)

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

    def __init__(self, positions: WritePositions) -> None:
        self.positions = positions

    async def handle(self, scope: Scope, receive: Receive, send: Send, next_app: ASGIApp) -> None:
        principal = scope.get("user")
        if scope["method"] not in ("POST", "PUT") or principal is None:
            await next_app(scope, receive, send)
            return
        positions = self.positions
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


def holds_write_by(
    written: int,
    reached: Callable[[int, float], bool],
    failing: Callable[[], bool],
    deadline: float,
    on_read_servers: bool,
) -> bool:
    """`holds_write` within what is left until `deadline` (of `time.monotonic`). On the read servers, a
    fault of theirs (down, refusing connections, a statement cancelled by their replay) is a no, logged:
    the read then goes to the primary, whose faults are the caller's."""
    left = max(0.0, deadline - time.monotonic())
    try:
        return holds_write(written, reached, failing, left)
    except READ_SERVER_FAULTS as fault:
        if not on_read_servers:
            raise
        log.warning("the read servers could not serve a read (%s); the primary serves it", fault)
        return False


# --- the read servers: reads on a standby that has the partner's last write, else on the primary ---


@dataclass(frozen=True)
class ReadPools:
    """The connections one kind of read is served on: the read servers' (`standby`, on
    BROKER_LEDGER_READ_DATABASE_URL) first when there are any, then the primary's; without read servers,
    the primary's only, as before there were any."""

    primary: ConnectionPool
    standby: ConnectionPool | None = None

    def in_turn(self) -> tuple[ConnectionPool, ...]:
        return (self.primary,) if self.standby is None else (self.standby, self.primary)

    def close(self, timeout: float = 5.0) -> None:
        for pool in self.in_turn():
            pool.close(timeout)


@dataclass(frozen=True)
class TrackedView:
    """A projection's view as a read on a connection finds it: its name (as a refusal says it), whether it
    has reached a position (waiting at most some seconds), and whether its projection has a recorded
    failure."""

    projection: str
    reached: Callable[[Connection, int, float], bool]
    failing: Callable[[Connection], bool]


@contextmanager
def holding_last_write(
    pools: ReadPools,
    positions: WritePositions,
    partner: str,
    wait_seconds: float,
    view: TrackedView,
    answer: str,
) -> Iterator[Connection]:
    """A connection, for the block, on which `view` holds the partner's last write: the read servers'
    when they reach it within `wait_seconds`, else the primary's within what is left of them; else 503
    `read_model_behind`, as `answer` (the reserves, a reconciliation) would miss that write. Without read
    servers, the write is looked up on the primary's connection that then waits for it and serves the
    read."""
    deadline = time.monotonic() + wait_seconds
    written = None if pools.standby is None else last_write(pools.primary, positions, partner)
    for pool in pools.in_turn():
        on_read_servers = pool is not pools.primary
        with contextlib.ExitStack() as lent:
            conn = _lent(lent, pool, on_read_servers)
            if conn is None:
                continue
            if written is None:
                written = positions.last(conn, partner)
            reached, failing = partial(view.reached, conn), partial(view.failing, conn)
            if holds_write_by(written, reached, failing, deadline, on_read_servers):
                yield conn
                return
            if on_read_servers:
                served_by_the_primary(view.projection, partner, written)
            else:
                log.warning("%s behind %s's last write (%d); answered 503", view.projection, partner, written)
                raise read_model_behind(failing(), view.projection, answer)


def served_by_the_primary(projection: str, partner: str, written: int) -> None:
    """Says that the read servers' view did not reach the partner's last write within the wait (their
    replay lags, or their projection's view does), so the primary serves the read."""
    log.warning(
        "the read servers' %s do not show %s's last write (%d) in time: the primary serves the read",
        projection,
        partner,
        written,
    )


class PinnedConnections:
    """Stands in for the pool of a view on the read servers (`installed_in` its datastore), so that a read
    waits and reads on one server: inside `pinned`, every statement of the thread runs on the one connection
    it took; outside, or in other threads, the pool lends as it does. With `load_balance_hosts=random` a
    pool's connections go to different standbys, which have replayed more or less: a wait on one and a read
    on another could miss the write waited for."""

    def __init__(self, pool: Any) -> None:
        self.pool = pool
        self._held = threading.local()

    @classmethod
    def installed_in(cls, datastore: Any) -> PinnedConnections:
        """Puts one in place of `datastore`'s pool (once: a second call finds it there)."""
        if not isinstance(datastore.pool, cls):
            datastore.pool = cls(datastore.pool)
        return datastore.pool

    @contextmanager
    def pinned(self) -> Iterator[bool]:
        """Holds one connection for this thread's statements inside; False (logged) when the read servers
        give none, and the read goes to the primary."""
        if getattr(self._held, "connection", None) is not None:
            yield True
            return
        self.pool.open()  # as eventsourcing's datastore does before each loan: its pool opens when first used
        with contextlib.ExitStack() as lent:
            conn = _lent(lent, self.pool, on_read_servers=True)
            self._held.connection = conn
            try:
                yield conn is not None
            finally:
                self._held.connection = None

    @contextmanager
    def connection(self, timeout: float | None = None) -> Iterator[Connection]:
        held = getattr(self._held, "connection", None)
        if held is not None:
            yield held
            return
        with self.pool.connection(timeout) as conn:
            yield conn

    def __getattr__(self, name: str) -> Any:
        return getattr(self.pool, name)  # open, close, get_stats, ... of the pool itself


def last_write(pool: ConnectionPool, positions: WritePositions, partner: str) -> int:
    """The partner's last written position, read on a connection of `pool` (the primary's)."""
    with pool.connection() as conn:
        return positions.last(conn, partner)


def _lent(lent: contextlib.ExitStack, pool: ConnectionPool, on_read_servers: bool) -> Connection | None:
    """A connection of `pool`, given back when `lent` closes; None when the read servers cannot give one
    (logged: the read goes to the primary)."""
    try:
        return lent.enter_context(pool.connection())
    except READ_SERVER_FAULTS as fault:
        if not on_read_servers:
            raise
        log.warning("no connection to the read servers (%s); the primary serves the read", fault)
        return None
