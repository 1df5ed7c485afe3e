"""Rebuild benchmark: `broker-ledger projections rebuild` (every projection, from the first event) over a
store of realistic events, timed as an operator runs it.

Run:

    .venv/bin/python bench/rebuild.py [--events 20000] [--runs 1]
                                      [--database-url postgresql://postgres@127.0.0.1:5432/postgres]

What it does, in order:
1. Creates a fresh database `bench_rebuild_<random>` on the PostgreSQL of --database-url (dropped at the end,
   also when interrupted).
2. Fills its event store through the real application (`Ledger` in this process, with the demo settings, a
   settable clock and the driver of use cases the projection tests use too, bench/history.py), round after
   round until the log holds --events events, then VACUUMs it (as a store some time in service is). A round:
   two customers (one per partner, trust level Plus), each with a BTC account; buys (staged and committed,
   then sent out and completed; committed at once and left sending; staged and cancelled) and sells (paid,
   confirmed and paid out at partner `demo`; paid and completed at `other`; paid the wrong amount and
   blocked); half of them with a callback URL. Every tenth round leaves a sell to lapse, expired a day later
   at the end; the clock moves a minute a round, so the days change.
3. Runs `broker-ledger projections rebuild` --runs times (after a CHECKPOINT each, so a run does not pay for
   the writes before it) as bench/load.py's `measure_rebuild` does: a subprocess with DATABASE_URL, so its
   start-up is included. Prints events, seconds, events/s, and CPU seconds of the rebuild (the command and
   every process it starts, from the kernel's accounting of waited-for children) and of PostgreSQL: the
   backends of the benchmark's database (sampled from /proc every 20 ms while the command runs, so a
   backend's last few milliseconds may be missed) and the server's auxiliary processes (WAL writer,
   checkpointer, ...: server-wide, other databases' work included).
4. Checks that each projection's position is the head of the log.

The machine is shared: wall time moves with whatever else runs; the CPU seconds much less so.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import resource
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a script: the project's packages and bench/ are importable
    sys.path.insert(0, str(ROOT))

from application.adapters.addresses import Bip32AddressBook  # noqa: E402
from application.adapters.prices import FixedPrices  # noqa: E402
from application.ledger import Ledger  # noqa: E402
from application.settings import load_settings  # noqa: E402
from application.store.database import eventsourcing_env, with_database  # noqa: E402
from application.store.log import EVENTS_SCHEMA  # noqa: E402
from application.use_cases import UseCases  # noqa: E402
from bench.clock import FakeClock  # noqa: E402
from bench.cpu import process_seconds, processes_named  # noqa: E402
from bench.history import CustomerAddresses, Driver  # noqa: E402
from bench.load_support import VENV_BIN, checkpoint, drop_database, scalar  # noqa: E402
from projections.base.runner import open_view  # noqa: E402
from projections.catalog import PROJECTIONS  # noqa: E402

DEFAULT_DATABASE_URL = "postgresql://postgres@127.0.0.1:5432/postgres"
CALLBACK_URL = "https://hooks.partner.example/broker"
SAMPLE_SECONDS = 0.02
STARTED = time.monotonic()


def note(message: str) -> None:
    print(f"[{time.monotonic() - STARTED:6.1f} s] {message}", file=sys.stderr, flush=True)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=20_000, help="events in the store, at least")
    parser.add_argument("--runs", type=int, default=1, help="rebuilds timed on the same store")
    parser.add_argument(
        "--database-url", default=DEFAULT_DATABASE_URL, help="a server to create a database on"
    )
    return parser.parse_args()


# --- the store ------------------------------------------------------------------------------------------


class Workload:
    """Rounds of realistic use cases, through the driver of bench/history.py."""

    def __init__(self, use_cases: UseCases, clock: FakeClock) -> None:
        self.clock = clock
        self.use_cases = use_cases
        self.drive = Driver(use_cases, self.clock, CustomerAddresses(use_cases.ledger.settings))
        self.lapsing: list[Any] = []
        self.rounds = 0

    def round(self) -> None:
        self.rounds += 1
        number = self.rounds
        for partner in ("demo", "other"):
            code = f"c{number}-{partner}"
            self.drive.customer(partner, code)
            self.buys(partner, code, callback=number % 2 == 0)
            self.sells(partner, code, callback=number % 2 == 1)
        if number % 10 == 0:
            self.lapsing.append(self.drive.sell("demo", f"c{number}-demo", "0.0001"))
        self.clock.advance(minutes=1)

    def buys(self, partner: str, code: str, callback: bool) -> None:
        extra = {"callback_url": CALLBACK_URL} if callback else {}
        completed = self.drive.buy(partner, code, "100", payment_reference=f"ref-{code}", **extra)
        self.use_cases.buys.commit(partner, completed.code)
        self.drive.sendout(completed, 1)
        self.drive.sendout(completed, 2)
        self.drive.buy(partner, code, "50", stage=False, **extra)
        cancelled = self.drive.buy(partner, code, "75", **extra)
        self.use_cases.alternative.cancel_staged(partner, cancelled.code, "payment failed")

    def sells(self, partner: str, code: str, callback: bool) -> None:
        extra = {"callback_url": CALLBACK_URL} if callback else {}
        paid = self.drive.sell(partner, code, "0.002", **extra)
        self.drive.deposit(paid, 1)
        self.drive.deposit(paid, 2)
        if partner == "demo":
            self.use_cases.settlement.confirm_payout(partner, paid.code, f"payout-{code}", "IBAN-1")
            self.use_cases.settlement.pay_out(partner, paid.code)
        blocked = self.drive.sell(partner, code, "0.001", **extra)
        self.drive.deposit(blocked, 2, Decimal("0.0005"))

    def expire_lapsed(self) -> None:
        self.clock.advance(days=1)
        for sell in self.lapsing:
            self.use_cases.settlement.expire(sell.order.partner, sell.code)


def fill_store(url: str, events: int) -> int:
    """Writes rounds of the workload until the log holds `events` events; the head of the log."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(EVENTS_SCHEMA)))
    settings = load_settings()
    env = {**eventsourcing_env(url, EVENTS_SCHEMA), "POSTGRES_POOL_SIZE": "2", "POSTGRES_MAX_OVERFLOW": "2"}
    clock = FakeClock()
    ledger = Ledger(settings, clock, env=env)
    try:
        use_cases = UseCases.of(ledger, FixedPrices(settings, clock), Bip32AddressBook(settings.cryptos))
        workload = Workload(use_cases, clock)
        while (head := ledger.recorder.max_notification_id() or 0) < events:
            workload.round()
            if workload.rounds % 50 == 0:
                note(f"{head} events")
        workload.expire_lapsed()
        head = ledger.recorder.max_notification_id() or 0
    finally:
        ledger.close()
    with psycopg.connect(url, autocommit=True) as conn:  # vacuumed, as a store some time in service is
        conn.execute(sql.SQL("VACUUM (ANALYZE) {}.ledger_events").format(sql.Identifier(EVENTS_SCHEMA)))
    return head


# --- the rebuild ------------------------------------------------------------------------------------------


@dataclass
class BackendSampler:
    """CPU seconds of the PostgreSQL backends connected to `database` (their title names it), sampled."""

    database: str
    seconds: dict[int, float] = field(default_factory=dict)
    _stopped: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> BackendSampler:
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> float:
        self._stopped.set()
        if self._thread is not None:
            self._thread.join()
        self.sample()
        return sum(self.seconds.values())

    def _run(self) -> None:
        while not self._stopped.wait(SAMPLE_SECONDS):
            self.sample()

    def sample(self) -> None:
        for pid in processes_named("postgres"):
            with contextlib.suppress(OSError):
                title = Path(f"/proc/{pid}/cmdline").read_bytes()
                if f" {self.database} ".encode() in title:
                    self.seconds[pid] = max(self.seconds.get(pid, 0.0), process_seconds(pid))


def auxiliary_seconds() -> dict[int, float]:
    """CPU seconds of PostgreSQL's processes that serve no client (WAL writer, checkpointer, ...)."""
    found = {}
    for pid in processes_named("postgres"):
        with contextlib.suppress(OSError):
            title = Path(f"/proc/{pid}/cmdline").read_bytes()
            if b"127.0.0.1(" not in title and b"[local]" not in title:
                found[pid] = process_seconds(pid)
    return found


def backend_seconds_before(database: str) -> dict[int, float]:
    sampler = BackendSampler(database)
    sampler.sample()
    return dict(sampler.seconds)


@dataclass
class RebuildRun:
    seconds: float
    rebuild_cpu: float
    backends_cpu: float
    auxiliary_cpu: float


def rebuild(url: str, database: str) -> RebuildRun:
    """Times `broker-ledger projections rebuild` in a subprocess; the CPU seconds it and PostgreSQL used."""
    checkpoint(url)
    env = {**os.environ, "DATABASE_URL": url, "PYTHONUNBUFFERED": "1"}
    env.pop("BROKER_LEDGER_SETTINGS", None)
    before_children = resource.getrusage(resource.RUSAGE_CHILDREN)
    before_backends = backend_seconds_before(database)
    before_auxiliary = auxiliary_seconds()
    sampler = BackendSampler(database).start()
    begun = time.perf_counter()
    command = [str(VENV_BIN / "broker-ledger"), "projections", "rebuild"]
    finished = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - begun
    after_children = resource.getrusage(resource.RUSAGE_CHILDREN)
    time.sleep(0.1)  # the backends' last CPU (they end with the connections)
    backends = sampler.stop() - sum(before_backends.values())
    after_auxiliary = auxiliary_seconds()
    if finished.returncode != 0:
        raise RuntimeError(f"projections rebuild failed: {finished.stdout[-1500:]}{finished.stderr[-1500:]}")
    rebuild_cpu = (after_children.ru_utime + after_children.ru_stime) - (
        before_children.ru_utime + before_children.ru_stime
    )
    auxiliary = sum(
        after_auxiliary[pid] - before_auxiliary[pid] for pid in after_auxiliary if pid in before_auxiliary
    )
    return RebuildRun(seconds, rebuild_cpu, backends, auxiliary)


def positions(url: str) -> dict[str, int]:
    """Each projection's tracking position."""
    found = {}
    for spec in PROJECTIONS:
        view = open_view(url, spec)
        try:
            found[spec.name] = view.position()
        finally:
            view.datastore.close()
    return found


def report(events: int, run: RebuildRun) -> None:
    print(
        f"events {events}  seconds {run.seconds:.2f}  events/s {events / run.seconds:,.0f}  "
        f"CPU s: rebuild {run.rebuild_cpu:.2f}, PostgreSQL backends {run.backends_cpu:.2f}, "
        f"PostgreSQL auxiliary (server-wide) {run.auxiliary_cpu:.2f}",
        flush=True,
    )


def main() -> None:
    args = parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # the `finally` drops the database
    database = f"bench_rebuild_{os.urandom(4).hex()}"
    with psycopg.connect(args.database_url, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(database)))
    url = with_database(args.database_url, database)
    try:
        note(f"database {database}: writing {args.events} events through the ledger")
        head = fill_store(url, args.events)
        events = scalar(url, "SELECT count(*) FROM ledger.ledger_events")
        note(f"{events} events (head {head}); rebuilding {args.runs} time(s)")
        for _ in range(args.runs):
            run = rebuild(url, database)
            report(events, run)
            behind = {name: at for name, at in positions(url).items() if at != head}
            if behind:
                sys.exit(f"projections not at the head {head}: {behind}")
    finally:
        drop_database(args.database_url, database)


if __name__ == "__main__":
    main()
