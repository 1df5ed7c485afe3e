"""The event store's write path alone: saves per second of concurrent threads, default vs group commit.

Run:

    .venv/bin/python bench/write_path.py [--seconds 5] [--threads 1,8,32,64] [--aggregates-per-save 3]
                                         [--database-url postgresql://postgres@127.0.0.1:5432/postgres]

Each thread saves new aggregates in a loop (`--aggregates-per-save` aggregates of one event each per save,
as a created buy saves its transaction and two limit windows) through an eventsourcing `Application` whose
environment comes from `application.store.database.eventsourcing_env`, once with eventsourcing's own
PostgreSQL recorder (BROKER_LEDGER_GROUP_COMMIT=off: one transaction and one table lock per save) and once
with `application.store.group_commit.GroupCommitRecorder`. Each run writes into a fresh schema, dropped
afterwards.
Prints saves/s, events/s, and for group commit the mean number of saves per committed transaction.
"""

from __future__ import annotations

import argparse
import threading
import time
import uuid

import psycopg
from eventsourcing.application import Application
from eventsourcing.domain import Aggregate, event
from psycopg import sql

from application.store.database import ensure_schema, eventsourcing_env


class Entry(Aggregate):
    @event("Written")
    def __init__(self, text: str) -> None:
        self.text = text


def run(url: str, group_commit: bool, threads: int, seconds: float, per_save: int) -> tuple[int, float, int]:
    """Saves made by `threads` threads in `seconds`; returns (saves, elapsed, transactions or 0)."""
    schema = f"bench_write_{uuid.uuid4().hex[:8]}"
    ensure_schema(url, schema)
    env = eventsourcing_env(url, schema, group_commit=group_commit)
    env.update(POSTGRES_POOL_SIZE=str(min(threads, 20)), POSTGRES_MAX_OVERFLOW="0")
    app = Application(env=env)
    counts = [0] * threads
    deadline = time.perf_counter() + seconds

    def write(n: int) -> None:
        while time.perf_counter() < deadline:
            app.save(*(Entry("x" * 200) for _ in range(per_save)))
            counts[n] += 1

    started = time.perf_counter()
    workers = [threading.Thread(target=write, args=(n,)) for n in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    elapsed = time.perf_counter() - started
    transactions = getattr(app.recorder, "batches_committed", 0)
    app.close()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(schema)))
    return sum(counts), elapsed, transactions


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--database-url", default="postgresql://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--threads", default="1,8,32,64")
    parser.add_argument("--aggregates-per-save", type=int, default=3)
    args = parser.parse_args()
    print(f"{'recorder':<22} {'threads':>7} {'saves/s':>9} {'events/s':>9} {'saves per commit':>17}")
    for threads in (int(t) for t in args.threads.split(",")):
        for group_commit in (False, True):
            saves, elapsed, transactions = run(
                args.database_url, group_commit, threads, args.seconds, args.aggregates_per_save
            )
            name = "group commit" if group_commit else "eventsourcing default"
            per_commit = f"{saves / transactions:.1f}" if transactions else "1.0"
            print(
                f"{name:<22} {threads:>7} {saves / elapsed:>9,.0f} "
                f"{saves * args.aggregates_per_save / elapsed:>9,.0f} {per_commit:>17}",
                flush=True,
            )


if __name__ == "__main__":
    main()
