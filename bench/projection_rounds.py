"""Live projection rounds: what a page costs when every projection reads and writes it on its own (as the
live runners did before `projections/live.py`) against all of them in one pass (one read, one decode, one
transaction on one connection: `live.apply_together`), at page sizes from a trickle to a backlog.

Run:

    .venv/bin/python bench/projection_rounds.py [--events 6000] [--pages 4,12,50,500]
                                                [--database-url postgresql://postgres@127.0.0.1:5432/postgres]

It fills a fresh database (`bench_load_<random>`, dropped at the end) with the workload of bench/rebuild.py
(`fill_store`), then for each page size replays the whole log into fresh schemas twice: each projection
alone (`runner.replay`, a page per transaction on its own connection), then all together
(`live.ProjectionWorker`'s round: `lanes.read_page`, `live.apply_together`). It prints, per event, this
process's CPU, the CPU of the PostgreSQL backend(s) doing the work (from /proc), and wall time. The machine
is shared: the CPU figures move far less than wall.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.cpu import process_seconds  # noqa: E402
from bench.load_support import drop_database, fresh_database  # noqa: E402
from bench.rebuild import DEFAULT_DATABASE_URL, fill_store, note  # noqa: E402
from projections.base.connection import connect  # noqa: E402
from projections.base.runner import open_view, replay  # noqa: E402
from projections.catalog import PROJECTIONS  # noqa: E402
from projections.lanes import Lane, PageDecoder, read_page  # noqa: E402
from projections.live import apply_together, event_log  # noqa: E402


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=6000, help="events in the store, at least")
    parser.add_argument("--pages", default="4,12,50,500", help="comma-separated page sizes, one run each")
    parser.add_argument(
        "--database-url", default=DEFAULT_DATABASE_URL, help="a server to create a database on"
    )
    return parser.parse_args()


@contextmanager
def measured(events: int, label: str, backends: list[int]) -> Iterator[None]:
    """Prints the CPU of this process and of the PostgreSQL `backends` per event, and the wall time."""
    started, cpu = time.monotonic(), time.process_time()
    before = {pid: process_seconds(pid) for pid in backends}
    yield
    wall, cpu = time.monotonic() - started, time.process_time() - cpu
    backend = sum(process_seconds(pid) - before[pid] for pid in backends)
    print(
        f"{label:<28} python {1e6 * cpu / events:7.1f} µs/event   PostgreSQL {1e6 * backend / events:7.1f}"
        f" µs/event   wall {1e6 * wall / events:7.1f} µs/event",
        flush=True,
    )


def backend_pid(connection: psycopg.Connection) -> int:
    return connection.execute("SELECT pg_backend_pid() AS pid").fetchone()["pid"]


def each_alone(url: str, events: int, page: int) -> None:
    """Every projection replayed on its own connection, a page per transaction: the runners before."""
    with connect(url, "bench rounds") as first:
        log_app = event_log(url, first)
        connections = [connect(url, "bench rounds") for _ in PROJECTIONS]
        try:
            views = [
                open_view(url, spec, schema=f"alone_{page}_{spec.name.lower()}", connection=connection)
                for spec, connection in zip(PROJECTIONS, connections, strict=True)
            ]
            pids = [backend_pid(connection) for connection in connections] + [backend_pid(first)]
            with measured(events, f"pages of {page}, each alone", pids):
                for spec, view in zip(PROJECTIONS, views, strict=True):
                    replay(log_app, spec, view, batch=page)
        finally:
            for connection in connections:
                connection.close()


def all_together(url: str, events: int, page: int) -> None:
    """Every projection in one pass on one connection, as `live.ProjectionWorker` runs them."""
    with connect(url, "bench rounds") as connection:
        log_app = event_log(url, connection)
        lanes = [
            Lane(
                spec,
                open_view(url, spec, schema=f"together_{page}_{spec.name.lower()}", connection=connection),
            )
            for spec in PROJECTIONS
        ]
        with measured(events, f"pages of {page}, together", [backend_pid(connection)]):
            while notifications := read_page(log_app, min(lane.position for lane in lanes) + 1, page, None):
                apply_together(connection, lanes, notifications, PageDecoder(log_app.mapper.to_domain_event))


def main() -> None:
    args = parse_args()
    database, url = fresh_database(args.database_url)
    try:
        note(f"database {database}: writing {args.events} events through the ledger")
        events = fill_store(url, args.events)
        for page in (int(size) for size in args.pages.split(",")):
            each_alone(url, events, page)
            all_together(url, events, page)
    finally:
        drop_database(args.database_url, database)


if __name__ == "__main__":
    main()
