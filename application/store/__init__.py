"""The event store: eventsourcing's PostgreSQL store for the ledger's events, and what we add to it.

The ledger stores its events with the library, in its format: one table (`ledger.ledger_events`), one global
order (the notification id), aggregates rebuilt by replaying their events. Everything here keeps that format,
so the library's own tools, the projections and an auditor's replay read the store as the library wrote it.
What each module adds, and the rule it keeps:

`log` - `LedgerLog`, the ledger as an eventsourcing `Application` that knows only how its events are stored
    (its name, hence its table, and the transcodings): what projections subscribe to and auditors replay.

`msgspec_mapper` - `EventCodecMapper`, how events are written now: msgspec JSON marked `{"_v_":2,...}`,
    each decoded straight into its class's typed fields (Decimal, UUID, datetime, value objects). A state
    without the marker (every event stored before, and what the new format cannot hold, such as snapshots)
    is read by the library's transcoder exactly as before. Its docstring has the rules and SQL for both.

`transcodings` - the domain's value objects (orders, chain payments...) for both formats, registered once for
    the application, the projections and the callbacks' snapshots alike, so all of them decode the same bytes.

`aggregates` - `LedgerStore`, how every use case loads and saves. Rules:
    - read-ahead: `loading(*ids)` reads several aggregates' histories in one query, each from its latest
      snapshot on; `find` inside the block rebuilds from what was read. Only for a block that saves at its
      end: what it finds is as of the start of the block, and the save's optimistic concurrency (aggregate
      versions) refuses it if anything changed meanwhile. An id named `LatestOf(id)` has only its latest
      event read (`latest_event`): a limit window loads from the running total its last event carries.
    - retry: a use case that loses a version race is run again from the start (it recorded nothing).
    - save: the library's save, then the request's write position is raised (`positions`).

Snapshots - the address pools, whose history only grows, are snapshotted by the library every 100
    allocations (`Ledger.snapshotting_intervals`) and loaded from the latest snapshot plus the events since,
    by the read-ahead's one query. Limit windows need none: they load from their latest event.

`group_commit/` - `GroupCommitRecorder`: concurrent saves of one process share one database transaction.
    Rules (the package's docstring has the detail): notification ids become visible in commit order across
    processes (the events table's lock is held from before the ids are issued until COMMIT, as the library
    does); a version conflict or a save's own data error fails only that save; a save returns only after
    COMMIT, with `synchronous_commit` on; a batch waits a bounded time for the lock and for each statement,
    and a request a bounded time for its save (then 503); after a connection fault the batch is read back, so
    a landed save is never retried into a conflict. `BROKER_LEDGER_GROUP_COMMIT=off` goes back to the
    library's recorder. A room of its own: `recorder` (the queue's side, the committer thread), `batches`
    (how a batch is written), `save_queue` (what waits: saves of events, and companions, statements on
    another table that ride in its next transaction, such as an Idempotency-Key's claim or answer), `types`
    (`PendingSave`), `append_function` (what a batch does under the lock, as one statement: a PL/pgSQL
    function takes the lock, notifies, writes the events and the write positions, and COMMIT follows at once),
    `commit_watch` (a batch past its deadline is interrupted and its connection replaced; whether the
    committer commits, GET /health), `read_back` (a batch settled after a connection fault by what the store
    holds). Nothing of the store outside it imports it (the environment names its recorder by topic).

`request_writes` - `RequestWrites`: what a request writes through the store (no transaction boundary): its
    write position for read-your-writes, and the statements riding with its first save; opened by the
    interface, joined by `LedgerStore.save(..., unit=)` and the group committer.

`read_ahead` - the recorder's reads: a use case's read-ahead (several aggregates' histories, and of others
    only their latest event, in one round trip) and the library's reads tried twice, not ten times.

`binary_arrays` - arrays of one known type (uuid, text, bytea, int4, int8, timestamptz) sent in PostgreSQL's
    binary format, built in one pass instead of psycopg's item-by-item dumping.

`schema_lock` - tables and schemas are created under one advisory lock, so any number of workers and
    replicas may start at once on an empty database.

`advisory_locks` - the service's advisory locks are its own: the functions that take one are revoked from
    PUBLIC in its database and granted to its role (`analyst create-role` does it), so a read-only role
    cannot hold up its start or its projections.

`positions` - read-your-writes: the last notification id a request's saves recorded, which a later read by
    the same partner waits for (rather than for the whole log). With group commit the committer upserts each
    partner's position inside the events' own transaction (under a savepoint on the one-by-one path, so it
    never fails a save); the API writes a position itself only when the store did not keep it.

`database` - connection settings: the URL (or the embedded server), the pools' connection budget
    (`BROKER_LEDGER_DB_CONNECTIONS`), each connection's `application_name`, lock and statement timeouts; a
    pooled connection is checked before a loan only when it sat idle long enough to have gone stale.

`embedded_postgres` - the private PostgreSQL started from a pip-installed server when no `DATABASE_URL` is
    given; owned by the `serve` that started it and stopped when that process ends, however it ends.
"""
