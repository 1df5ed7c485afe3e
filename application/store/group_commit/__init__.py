"""Group commit: concurrent saves of one process share one database transaction.

eventsourcing's PostgreSQL recorder gives each save its own transaction, and each of those takes the events
table's EXCLUSIVE lock so that notification ids become visible in the order they were issued (a projection
reading the log must never pass over an id that a slower transaction commits later). With one transaction
per save, the lock makes saves queue one at a time, each paying its own round trips and its own commit.

`GroupCommitRecorder` keeps the lock and changes what one lock holder carries. A request's thread hands its
events to the process's committer thread and waits. The committer takes every save waiting at that moment
(a *batch*), writes them in one transaction under the lock, commits, and only then wakes the waiters, each
with its own notification ids. While one batch commits, the next collects, so the busier the process, the
more saves share a commit.

What the projections and the use cases rely on is kept:
- Commit order: a batch holds the table lock from before its ids are issued until its commit, as the library
  does for a single save, so ids become visible in commit order across processes. The lock is the serial
  point of every save of the cluster, so a batch does under it as little as it can: the statements riding
  with it come first, then ONE statement takes the lock, notifies and writes the events and the write
  positions (`application.store.group_commit.append_function`), and COMMIT follows at once; the time each
  batch held the lock is in `broker_ledger_events_lock_held_seconds` (bench/serial_point.py,
  docs/scaling.md).
- A version conflict fails only its own save, with the same `IntegrityError` (a `RecordConflictError`) the
  library raises, which the use cases answer by reloading and trying again. A save that writes a version an
  earlier save of the batch writes is refused before anything is sent; if the batch written together finds
  a version already stored, the saves that write stored versions are looked up (one query, no lock) and
  refused, and the others written together again. Only if that too is refused is the batch written save by
  save, each under a savepoint (the lock held throughout, a round trip a save: `..._one_by_one_total`).
- Durability: waiters are woken only after COMMIT returns, with `synchronous_commit` left on, so a save that
  returned is on disk.
- Read-your-writes: once told the write positions' table (`keep_write_positions`), the batch also raises, in
  the same transaction, the position of each partner whose request saved in it (the save's `unit`, its
  `RequestWrites`, see `application.store.request_writes`), so the request needs no statement of its own
  for it; a save settled otherwise leaves it to the interface.
- Companions (`write_along`, `application.store.group_commit.save_queue`): statements on another table, from
  an event loop, ride in the next batch's transaction, with its events or alone (then without the table's lock
  and NOTIFY), and their waiter gets each statement's rows after COMMIT. The interface's Idempotency-Key
  claims and answers go this way, so they need no transaction, commit and round trip of their own; the claims
  riding with the saves of a batch go as one statement (`BatchedRow`, `application.store.group_commit.
  riding`). A companion
  the database refuses fails alone (under a savepoint, as a refused save, with psycopg's error); after a
  connection fault it fails, since it cannot be read back (it may have committed).
- The batch's arrays are built in PostgreSQL's binary format in one pass (`application.store.binary_arrays`).

What a fault does:
- A batch waits at most `LOCK_TIMEOUT` for the table lock and runs at most `STATEMENT_TIMEOUT` per statement;
  a request waits at most `SAVE_WAIT_LIMIT` for its save. Past those it gets eventsourcing's
  `OperationalError`, which the interface answers 503 `database_unavailable` with `Retry-After`.
- The committer cannot wedge: a batch that holds its connection longer than `COMMIT_DEADLINE` (a wait the
  server's timeouts do not bound: a server waiting for the client, a silent network) is interrupted and its
  connection shut down (`application.store.group_commit.commit_watch`); the batch is settled as after a lost
  connection (below) and the next one runs on a new connection. `stalled` says when the committer does not
  commit (GET /health).
- The batch's pipeline is left (its block ends), never synced with `Pipeline.sync()` (psycopg 3.3): the
  sync sends the last messages with one non-blocking flush, ignores what it could not send and waits for
  the server's answer. A statement larger than the socket takes in a few tries (about 2 MB over a Unix
  socket, such as the embedded server's; tens of MB over TCP; less in a busy process) stayed half in
  libpq's buffer: the server waited for the rest (`ClientRead`), the committer for the server, for ever,
  and every save of the process behind it. Leaving the pipeline flushes until all is sent.
- A save that fails for its own data (an integrity, data or programming error) fails alone: the batch is
  written again save by save under savepoints, as for a version conflict.
- When the connection fails, the batch may or may not have committed (COMMIT may have reached the server
  before the connection was lost). The committer reads back the events it sent
  (`application.store.group_commit.read_back`): the saves found there succeed, the others fail with the
  connection's error, so a landed save is never retried into a version conflict.

Its modules: `recorder` (`GroupCommitRecorder`: the queue's side and the committer thread), `batches` (how a
batch is written), `save_queue` (what waits for the committer), `types` (`PendingSave`, a leaf),
`append_function` (the one statement under the lock), `riding` (the statements riding with the batch),
`commit_watch` (each batch's deadline, and whether the
committer commits), `read_back` (a batch after a lost connection). What a request hands over, its writes and
the statements riding with them, is `application.store.request_writes`, which imports nothing of this room.
"""

from __future__ import annotations

# the recorder's topic, as the environment names it (`application.store.database.GROUP_COMMIT_RECORDER`)
from application.store.group_commit.recorder import GroupCommitRecorder

__all__ = ["GroupCommitRecorder"]
