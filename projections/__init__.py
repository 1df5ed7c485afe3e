"""Projections: read models built from the ledger's events, each in its own tables and at its own position.

Every projection follows one recipe.

1. **Its tables**: a `ReadModel` (`projections.base.postgres`) subclass owns them (`create_statements`) and
   writes them only inside `recording(tracking)`, which records the event's position in the same
   transaction, so a crash never applies an event twice nor skips one.

2. **What it reads**: a `Projection[ThatReadModel]` whose `process_event` is eventsourcing's
   `singledispatchmethod`. Its default body skips the event (`self.view.skip(tracking)`); each
   `@process_event.register` names an event class it applies (a base class, such as `Transaction.Event`,
   takes every subclass). The runner (`projections.base.runner.process`) decodes only the events a
   registration takes; the others only move the position, undecoded. The one other way in is for a
   projection of the stored rows themselves, which must see every event's bytes: `process_stored(
   notification, decode, tracking)` (the audit chain, which decodes an event only for a checkpoint's time).

3. **How it writes a page**: the runner hands events in pages (`BROKER_LEDGER_PROJECTION_PAGE`, 500; a
   rebuild's are of `projections.rebuild.REBUILD_PAGE`, 5,000) inside `ReadModel.batch`, one transaction in
   pipeline mode with the position of the page's last event. A projection writes through the page helpers
   rather than one statement per event: `append_row` (rows that only accumulate: audit links, status
   history), `keep_row` / `forget_row` (the latest row per key: open deals), `page_rows` (rows it reads and
   rewrites, read once per page), `at_batch_end` (one statement for what the page summed up, such as the
   transactions' rows or the callback states). Rows go to PostgreSQL as one JSON parameter per statement
   (`projections.base.json_rows`; ids for `= ANY_ID`), and a page's handlers keep what they compute in memory
   (`kept`) rather than write or encode it event by event.

4. **Where it is listed**: `projections.catalog.PROJECTIONS` (the order of start, rebuild and verification).
   Live, a process runs the projections whose advisory locks it holds in one pass (`live.ProjectionWorker`):
   each page of the log is read and decoded once and handed to every projection, their rows and positions
   written in one transaction on one connection. A rebuild replays all of them in one pass too
   (`projections.rebuild`), each writing a page in its own transaction with its own position.

5. **How it is tested**: its rows for a scenario (`tests/projections/scenario.py`); the same tables whatever
   the page size (`tests/projections/test_page_sizes.py`: pages of 500, 2 and 1); a rebuild from the first
   event equals the live tables (`tests/projections/test_rebuild.py`, and for the one pass over all of them
   `tests/projections/test_rebuild_one_pass.py`); and, if analysts may read its tables, every column
   documented (`tests/projections/test_analytics_doc.py`).

The callbacks feature (`projections.callbacks`) is one package: its outbox projection follows this recipe,
and its delivery worker, sender and URL checks live beside it.
"""
