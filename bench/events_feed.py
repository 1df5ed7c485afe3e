"""Events feed benchmark: `GET /events` read from the first cursor to the head of a log of --events events,
and what long polling costs with --waiters requests waiting at once.

Run:

    .venv/bin/python bench/events_feed.py [--events 100000] [--waiters 500] [--idle-seconds 10]
                                          [--keep-log server.log] [--database-url postgresql://postgres@127.0.0.1:5432/postgres]

What it does, in order:
1. Creates a fresh database `bench_load_<random>` (dropped at the end) and fills its log with the rebuild
   benchmark's realistic rounds (bench/rebuild.py: customers, buys and sells of two partners, `demo` and
   `other`, through the use cases) until it holds --events events; then brings every projection to the head
   with `broker-ledger projections rebuild`, so that the server starts with nothing to catch up.
2. Reference, in this process: the whole log read and decoded page by page (`LedgerLog.page` and its
   decoder, pages of 500), events/s: what any read of the log costs at least.
3. Starts `broker-ledger serve --workers 1` on it (projections on, at the head), takes a token of
   `demo-broker`, and reads the partner's feed over HTTP from the first cursor to the head, pages of 500
   (`limit=500`), one request at a time: changes shown, pages, seconds, changes/s; and the index rows of the
   partner the feed passed (every event of its transactions and customers, shown or not), rows/s.
4. Idle cost: the server's CPU (the worker process, from /proc) over --idle-seconds with no request, then
   with --waiters requests of `demo-broker` waiting at the head (`wait=30`); meanwhile PostgreSQL's
   connections of the benchmark's database are sampled every 50 ms (pg_stat_activity, the sampler's own
   left out): how many there are, and which are not idle (running a statement or inside a transaction), by
   name. The waiters' measure starts once the server is quiet again after taking them in. Then one change
   (a customer registered) wakes them: by the server's access log, the seconds from the change's answer to
   each waiter's (and, as the benchmark saw it, from the start of the change's request to the last
   answer). The waiters' requests are written on raw sockets, all at once, and their answers read at the
   end: an HTTP client library with 500 connections takes seconds over each, which would blur both.

Prints one line per figure; the machine is shared, so wall times move with whatever else runs.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import psycopg

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a script: the project's packages and bench/ are importable
    sys.path.insert(0, str(ROOT))

from application.store.database import eventsourcing_env  # noqa: E402
from application.store.log import EVENTS_SCHEMA, LedgerLog  # noqa: E402
from bench.cpu import process_seconds  # noqa: E402
from bench.load_support import (  # noqa: E402
    VENV_BIN,
    bench_settings,
    broker_token,
    drop_database,
    free_port,
    fresh_database,
    running,
    server_env,
)
from bench.rebuild import fill_store, note, rebuild  # noqa: E402

DEFAULT_DATABASE_URL = "postgresql://postgres@127.0.0.1:5432/postgres"
PAGE = 500
SAMPLE_SECONDS = 0.05
HEADERS = {"api_version": "1.2"}


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=100_000, help="events in the log, at least")
    parser.add_argument("--waiters", type=int, default=500, help="long-polling requests waiting at once")
    parser.add_argument("--idle-seconds", type=float, default=10.0, help="how long the idle cost is measured")
    parser.add_argument("--keep-log", type=Path, help="where to copy the server's log at the end")
    parser.add_argument(
        "--database-url", default=DEFAULT_DATABASE_URL, help="a server to create a database on"
    )
    return parser.parse_args()


def log_read_rate(url: str) -> tuple[int, float]:
    """The reference: every event of the log read and decoded in pages; (events, seconds)."""
    log = LedgerLog(env={**eventsourcing_env(url, EVENTS_SCHEMA), "POSTGRES_POOL_SIZE": "1"})
    try:
        decode, position, count = log.decoder, 0, 0
        begun = time.perf_counter()
        while page := log.page(position + 1, PAGE):
            for notification in page:
                decode(notification)
            count += len(page)
            position = page[-1].id
        return count, time.perf_counter() - begun
    finally:
        log.close()


@dataclass
class FeedRead:
    changes: int = 0
    pages: int = 0
    seconds: float = 0.0
    cursor: str = ""


def read_feed(client: httpx.Client) -> FeedRead:
    """The partner's feed from the first cursor to the head, pages of PAGE, one request at a time."""
    read, after = FeedRead(), ""
    begun = time.perf_counter()
    while True:
        answer = client.get(f"/events?limit={PAGE}" + (f"&after={after}" if after else ""))
        answer.raise_for_status()
        page = answer.json()
        read.changes += len(page["data"])
        read.pages += 1
        after = page["nextCursor"]
        if not page["hasMore"]:
            break
    read.seconds = time.perf_counter() - begun
    read.cursor = after
    return read


def partner_rows(url: str, partner: str) -> int:
    with psycopg.connect(url) as conn:
        row = conn.execute("SELECT count(*) FROM read.events_feed WHERE partner = %s", (partner,)).fetchone()
        return int(row[0]) if row else 0


@dataclass
class ConnectionSampler:
    """PostgreSQL's connections to `database` (but the sampler's own), every SAMPLE_SECONDS."""

    url: str
    database: str
    totals: list[int] = field(default_factory=list)
    busy: list[int] = field(default_factory=list)
    busy_by: Counter[str] = field(default_factory=Counter)  # samples each connection was seen not idle in
    _stopped: threading.Event = field(default_factory=threading.Event)

    def __enter__(self) -> ConnectionSampler:
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stopped.set()
        self._thread.join()

    def _run(self) -> None:
        query = (
            "SELECT application_name, state, wait_event FROM pg_stat_activity "
            "WHERE datname = %s AND pid <> pg_backend_pid() AND backend_type = 'client backend'"
        )
        with psycopg.connect(self.url, autocommit=True) as conn:
            while not self._stopped.wait(SAMPLE_SECONDS):
                rows = conn.execute(query, (self.database,)).fetchall()
                busy = [f"{name} ({state}, {wait})" for name, state, wait in rows if state != "idle"]
                self.totals.append(len(rows))
                self.busy.append(len(busy))
                self.busy_by.update(set(busy))


@dataclass
class Idle:
    cpu_seconds: float
    seconds: float
    connections: int  # the most seen
    busy_samples: int  # samples that saw a connection not idle
    samples: int
    busy_by: Counter[str]

    @property
    def cpu_share(self) -> float:
        return self.cpu_seconds / self.seconds


def idle_cost(pid: int, url: str, database: str, seconds: float) -> Idle:
    """The server's CPU and the database's connections over `seconds` of whatever is going on now."""
    with ConnectionSampler(url, database) as sampler:
        cpu, begun = process_seconds(pid), time.perf_counter()
        time.sleep(seconds)
        cpu, took = process_seconds(pid) - cpu, time.perf_counter() - begun
    busy = sum(1 for value in sampler.busy if value)
    return Idle(cpu, took, max(sampler.totals, default=0), busy, len(sampler.totals), sampler.busy_by)


@dataclass
class Woken:
    changes: list[int]  # each waiter's
    after: list[float]  # seconds from the start of the change's request to each answer, in order
    settle: float  # seconds until the server's CPU was quiet with every waiter in


async def settled(pid: int, least: float = 2.0, most: float = 15.0) -> float:
    """Waits at least `least` seconds, then until the server spends under 10 % of a core in a second (the
    waiters have all come in and wait: taking them in costs several times that); the seconds it took."""
    begun = time.perf_counter()
    await asyncio.sleep(least)
    while time.perf_counter() - begun < most:
        cpu = process_seconds(pid)
        await asyncio.sleep(1.0)
        if process_seconds(pid) - cpu < 0.1:
            break
    return time.perf_counter() - begun


async def waiting_request(base_url: str, token: str, path: str) -> tuple[asyncio.StreamReader, Any]:
    """A GET sent on a connection of its own, its answer left to read (`answer_of`): the requests of the
    waiters are all sent at once, which an HTTP client library with 500 connections does not do quickly."""
    host, port = base_url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    head = (
        f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\napi_version: {HEADERS['api_version']}\r\n"
        f"Authorization: Bearer {token}\r\nConnection: close\r\n\r\n"
    )
    writer.write(head.encode())
    await writer.drain()
    return reader, writer


async def answer_of(reader: asyncio.StreamReader, writer: Any) -> tuple[int, float]:
    """The number of changes in a waiter's answer, and when it came."""
    raw = await reader.read()  # Connection: close: the server closes it after the answer
    at = time.perf_counter()
    writer.close()
    head, _, body = raw.partition(b"\r\n\r\n")
    if not head.startswith(b"HTTP/1.1 200"):
        raise RuntimeError(f"a waiter was answered {head[:80]!r}")
    return len(json.loads(body)["data"]), at


async def wait_and_wake(
    server: tuple[str, int],
    token: str,
    cursor: str,
    waiters: int,
    during: Callable[[], None],
    wake: Callable[[], None],
) -> Woken:
    """`waiters` requests waiting at `cursor`; once they all wait, `during()`, then `wake()`."""
    base_url, pid = server
    path = f"/events?after={cursor}&wait=30"
    sent = await asyncio.gather(*(waiting_request(base_url, token, path) for _ in range(waiters)))
    answers = [asyncio.create_task(answer_of(reader, writer)) for reader, writer in sent]
    settle = await settled(pid)
    early = [task for task in answers if task.done()]
    if early:
        failure = early[0].exception()
        raise RuntimeError(f"{len(early)} waiters answered before any change: {failure or early[0].result()}")
    await asyncio.to_thread(during)
    woken = time.perf_counter()
    await asyncio.to_thread(wake)
    done = await asyncio.gather(*answers)
    return Woken([count for count, _ in done], sorted(at - woken for _, at in done), settle)


def answered_after_the_change(log: Path) -> list[float]:
    """From the server's access log: the seconds from the end of the change's request (`POST /customer`)
    to the end of each `GET /events` logged after it, in order (the log's times are to the millisecond)."""
    lines = [json.loads(line) for line in log.read_text().splitlines() if '"broker_ledger.access"' in line]
    changed = next(
        datetime.fromisoformat(line["time"]) for line in reversed(lines) if line["path"] == "/customer"
    )
    return sorted(
        (datetime.fromisoformat(line["time"]) - changed).total_seconds()
        for line in lines
        if line["path"] == "/events" and datetime.fromisoformat(line["time"]) >= changed
    )


def register_customer(base_url: str, token: str) -> None:
    headers = {**HEADERS, "Authorization": f"Bearer {token}"}
    body = {"customerCode": f"wake-{time.time_ns()}", "trustLevel": "Basic"}
    httpx.post(f"{base_url}/customer", json=body, headers=headers, timeout=30).raise_for_status()


def main() -> int:
    args = parse_args()
    database, url = fresh_database(args.database_url)
    try:
        with tempfile.TemporaryDirectory(prefix="bench-feed-") as scratch:
            run(args, database, url, Path(scratch))
    finally:
        drop_database(args.database_url, database)
    return 0


def run(args: argparse.Namespace, database: str, url: str, scratch: Path) -> None:
    note(f"filling {database} to {args.events} events")
    head = fill_store(url, args.events)
    note(f"{head} events; projections rebuild")
    rebuild(url, database)
    events, seconds = log_read_rate(url)
    print(
        f"reference: log read and decoded in pages of {PAGE}: {events} events in {seconds:.2f} s, "
        f"{events / seconds:,.0f} events/s"
    )
    settings = scratch / "settings.toml"
    bench_settings(settings)
    port = free_port()
    command = [str(VENV_BIN / "broker-ledger"), "serve", "--port", str(port), "--workers", "1"]
    env = {**server_env(url, scratch / "var"), "BROKER_LEDGER_SETTINGS": str(settings)}
    try:
        with running(command, env, scratch / "server.log", "/health") as server:
            measure(args, database, url, scratch, server)
    finally:
        if args.keep_log is not None:
            shutil.copy(scratch / "server.log", args.keep_log)


def measure(args: argparse.Namespace, database: str, url: str, scratch: Path, server: Any) -> None:
    token = broker_token(server.base_url, scratch / "var")
    headers = {**HEADERS, "Authorization": f"Bearer {token}"}
    with httpx.Client(base_url=server.base_url, headers=headers, timeout=60) as client:
        read_feed(client)  # warm: the worker's first requests, the log's pages in the server's cache
        read = read_feed(client)
    rows = partner_rows(url, "demo")
    print(
        f"feed of partner demo, first cursor to the head, limit={PAGE}: {read.changes} changes "
        f"({rows} index rows passed) in {read.pages} pages, {read.seconds:.2f} s: "
        f"{read.changes / read.seconds:,.0f} changes/s, {rows / read.seconds:,.0f} rows/s"
    )
    pid = server.popen.pid
    quiet = idle_cost(pid, args.database_url, database, args.idle_seconds)
    measured: dict[str, Idle] = {}

    def during() -> None:
        measured["waiting"] = idle_cost(pid, args.database_url, database, args.idle_seconds)

    woken = asyncio.run(
        wait_and_wake(
            (server.base_url, pid),
            token,
            read.cursor,
            args.waiters,
            during,
            lambda: register_customer(server.base_url, token),
        )
    )
    waiting = measured["waiting"]
    for name, idle in (("no request", quiet), (f"{args.waiters} waiting", waiting)):
        print(
            f"idle, {name}: server CPU {idle.cpu_seconds:.3f} s in {idle.seconds:.1f} s "
            f"({100 * idle.cpu_share:.2f} % of a core); database connections at most "
            f"{idle.connections}, {idle.busy_samples} of {idle.samples} samples saw one not idle: "
            + (", ".join(f"{name} in {n}" for name, n in idle.busy_by.most_common()) or "none")
        )
    print(
        f"extra CPU of {args.waiters} waiters: {100 * (waiting.cpu_share - quiet.cpu_share):.2f} % of a core"
    )
    print(f"{args.waiters} waiters sent at once; the server was quiet again {woken.settle:.1f} s later")
    served = answered_after_the_change(scratch / "server.log")
    print(
        f"one change (a customer registered) woke {sum(1 for c in woken.changes if c == 1)} of "
        f"{args.waiters} waiters; by the server's access log, {len(served)} answers went out after the "
        f"change's own: the first {served[0]:.3f} s, the median {statistics.median(served):.3f} s, the "
        f"last {served[-1]:.3f} s after it (the benchmark had the last "
        f"{woken.after[-1]:.3f} s after starting the change's request)"
    )
    incidents = server.incidents()
    if incidents:
        print("server incidents:", *incidents[:5], sep="\n")
    note("done")


if __name__ == "__main__":
    raise SystemExit(main())
