"""Partner isolation benchmark: each partner pays only for its own history (issue 35, item 4).

Run:

    .venv/bin/python bench/partner_isolation.py [--events 50000] [--seconds 15] [--loops 4]
                                                [--database-url postgresql://postgres@127.0.0.1:5432/postgres]

What it does, in one run, against a real `broker-ledger serve --workers 1` (its projections inside, as by
default) on a fresh database `bench_load_<random>` of --database-url (dropped at the end):
1. Partner `demo` makes 3 transactions over HTTP (a buy sent out and confirmed, a sell paid and confirmed, a
   buy never sent out). /health is timed with no load (the floor: p50 and p99 of sequential requests for
   --seconds / 3), then `demo-auditor`'s reconciliation of a week around them, alone (median of 30).
2. Partner `other` adds --events events (50,000 by default) to the log: rounds of a customer, buys sent out
   and confirmed, sells paid and confirmed, a sell paid short (blocked), all within that week. For speed they
   are written through the store directly (the application's use cases on a `Ledger` in this process, on a
   clock of its own), not over HTTP; the server's projections follow them as they follow any write. Once the
   postings hold them all (and after a VACUUM (ANALYZE), as autovacuum keeps a store in service), `demo`'s
   reconciliation is timed again: target at most 1.5x the first.
3. --loops threads (4) each reconcile `other`'s last 366 days (its heaviest read, first page) in a loop,
   as `other-operator`, for --seconds; meanwhile /health (target p99 < 100 ms) and `demo-auditor`'s
   reconciliation are timed, sequentially. The heavy loops' answers are counted by status (429: the
   partner's slots were all taken). Then the server's VmRSS.

The benchmark, the server and PostgreSQL share the machine: the figures move with whatever else runs.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx
import psycopg
from psycopg import sql

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a script: the project's packages and bench/ are importable
    sys.path.insert(0, str(ROOT))

from application.adapters.addresses import Bip32AddressBook  # noqa: E402
from application.adapters.prices import FixedPrices  # noqa: E402
from application.ledger import Ledger  # noqa: E402
from application.settings import load_settings  # noqa: E402
from application.store.database import eventsourcing_env  # noqa: E402
from application.store.log import EVENTS_SCHEMA  # noqa: E402
from application.use_cases import UseCases  # noqa: E402
from bench.clock import FakeClock  # noqa: E402
from bench.history import CustomerAddresses, Driver  # noqa: E402
from bench.load_support import (  # noqa: E402
    VENV_BIN,
    as_in_service,
    bench_settings,
    broker_token,
    drop_database,
    free_port,
    fresh_database,
    rss_mb,
    running,
    server_env,
)
from projections.catalog import PROJECTIONS  # noqa: E402

DEFAULT_DATABASE_URL = "postgresql://postgres@127.0.0.1:5432/postgres"
CUSTOMER_ADDRESS = "bc1qw508d6qejxtdg4y5r3zarvary0c5xw7kv8f3t4"
ALONE_RUNS = 30
STARTED = time.monotonic()


def note(message: str) -> None:
    print(f"[{time.monotonic() - STARTED:6.1f} s] {message}", file=sys.stderr, flush=True)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=50_000, help="events partner other adds to the log")
    parser.add_argument("--seconds", type=float, default=15.0, help="how long the heavy loops run")
    parser.add_argument("--loops", type=int, default=4, help="concurrent heavy loops of partner other")
    parser.add_argument(
        "--database-url", default=DEFAULT_DATABASE_URL, help="a server to create a database on"
    )
    return parser.parse_args()


@dataclass
class Timings:
    """Latencies in seconds."""

    seconds: list[float] = field(default_factory=list)

    def quantile(self, q: float) -> float:
        ordered = sorted(self.seconds)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")

    def ms(self) -> str:
        p50, p99 = self.quantile(0.5) * 1000, self.quantile(0.99) * 1000
        return f"p50 {p50:.1f} ms, p99 {p99:.1f} ms ({len(self.seconds)} requests)"


class Api:
    """The server's API as one client of it: a token per client id, timed GETs."""

    def __init__(self, base_url: str, var: Path) -> None:
        self.http = httpx.Client(base_url=base_url, timeout=60)
        self.var = var
        self.headers: dict[str, dict[str, str]] = {}

    def as_client(self, client_id: str) -> dict[str, str]:
        if client_id not in self.headers:
            token = broker_token(str(self.http.base_url), self.var, client_id)
            self.headers[client_id] = {"Authorization": f"Bearer {token}", "api_version": "1.2"}
        return self.headers[client_id]

    def call(self, client_id: str, method: str, path: str, body: Any = None) -> Any:
        answer = self.http.request(method, path, json=body, headers=self.as_client(client_id))
        if answer.status_code >= 300:
            raise RuntimeError(f"{method} {path}: {answer.status_code} {answer.text}")
        return answer.json()

    def timed(self, client_id: str | None, path: str) -> tuple[float, httpx.Response]:
        headers = self.as_client(client_id) if client_id else {}
        begun = time.perf_counter()
        answer = self.http.get(path, headers=headers)
        return time.perf_counter() - begun, answer


def reconciliation_path(start: datetime, end: datetime) -> str:
    def iso(at: datetime) -> str:
        return at.astimezone(UTC).isoformat().replace("+00:00", "Z")

    return f"/reconciliation?from={iso(start)}&to={iso(end)}"


def small_partner(api: Api) -> None:
    """Partner demo's 3 transactions, over HTTP."""
    code = "iso-alice"
    api.call("demo-broker", "POST", "/customer", {"customerCode": code, "trustLevel": "Basic"})
    api.call("demo-broker", "PUT", f"/customer/{code}", {"status": "ACTIVE"})
    account = api.call(
        "demo-broker", "POST", f"/customer/{code}/accounts", {"customerCryptoAddress": CUSTOMER_ADDRESS}
    )
    buy = {
        "customerCode": code,
        "currencyCode": "EUR",
        "cryptoCode": "BTC",
        "fiatValue": 100,
        "destinationAddress": CUSTOMER_ADDRESS,
        "paymentMethodCode": "BANK_EUR_BUY",
    }
    sent = api.call("demo-broker", "POST", "/brokerbuy", buy)["transaction"]["transactionCode"]
    for confirmations in (1, 2):
        report = {"transactionCode": sent, "txId": f"out-{sent}", "confirmations": confirmations}
        api.call("demo-operator", "POST", "/chain/sendouts", report)
    sell = {k: v for k, v in buy.items() if k not in ("fiatValue", "destinationAddress")}
    sell |= {
        "accountCode": account["accountCode"],
        "paymentMethodCode": "BANK_EUR_SELL",
        "cryptoAmount": 0.001,
    }
    sold = api.call("demo-broker", "POST", "/paymentrequest/brokersell", sell)["transaction"]
    deposit = {
        "cryptoCode": "BTC",
        "address": sold["destinationCryptoAddress"],
        "txId": f"in-{sold['transactionCode']}",
        "cryptoAmount": sold["executedAmounts"]["cryptoAmount"],
        "confirmations": 2,
    }
    api.call("demo-operator", "POST", "/chain/deposits", deposit)
    api.call("demo-broker", "POST", "/brokerbuy", buy | {"fiatValue": 50})


def fill_other(url: str, events: int, start: datetime, span: timedelta) -> int:
    """Partner other's rounds through the store directly, until it added `events` events; the log's head.
    Its clock moves evenly over `span` from `start`, guessing 14 events a round."""
    settings = load_settings()
    env = {**eventsourcing_env(url, EVENTS_SCHEMA), "POSTGRES_POOL_SIZE": "2", "POSTGRES_MAX_OVERFLOW": "2"}
    clock = FakeClock(start)
    ledger = Ledger(settings, clock, env=env)
    try:
        use_cases = UseCases.of(ledger, FixedPrices(settings, clock), Bip32AddressBook(settings.cryptos))
        drive = Driver(use_cases, clock, CustomerAddresses(settings))
        first = ledger.recorder.max_notification_id() or 0
        step = span / max(1, events // 14)
        rounds = 0
        while (head := ledger.recorder.max_notification_id() or 0) - first < events:
            rounds += 1
            other_round(drive, use_cases, f"o{rounds}")
            clock.advance(seconds=step.total_seconds())
            if rounds % 200 == 0:
                note(f"partner other: {head - first} events")
        return ledger.recorder.max_notification_id() or 0
    finally:
        ledger.close()


def other_round(drive: Driver, use_cases: UseCases, code: str) -> None:
    """A customer of partner other; a buy sent out and confirmed; one committed at once and left sending; a
    sell paid and confirmed (other has no Payouts: it completes); a sell paid short (blocked)."""
    drive.customer("other", code)
    sent = drive.buy("other", code, "100")
    use_cases.buys.commit("other", sent.code)
    drive.sendout(sent, 1)
    drive.sendout(sent, 2)
    drive.buy("other", code, "50", stage=False)
    paid = drive.sell("other", code, "0.002")
    drive.deposit(paid, 1)
    drive.deposit(paid, 2)
    blocked = drive.sell("other", code, "0.001")
    drive.deposit(blocked, 2, Decimal("0.0005"))


def caught_up(url: str, head: int, timeout: float = 1800) -> None:
    """Waits until every projection has processed `head`, so that none works while the next phase is timed."""
    deadline = time.monotonic() + timeout
    tables = [sql.Identifier("read", f"{spec.name.lower()}_tracking") for spec in PROJECTIONS]
    query = sql.SQL(" UNION ALL ").join(
        sql.SQL("SELECT coalesce(max(notification_id), 0) FROM {}").format(table) for table in tables
    )
    with psycopg.connect(url, autocommit=True) as conn:
        while min(row[0] for row in conn.execute(query).fetchall()) < head:
            if time.monotonic() > deadline:
                raise RuntimeError(f"the projections did not reach {head} within {timeout} s")
            time.sleep(0.5)


def timed_series(api: Api, client_id: str | None, path: str, count: int = 0, seconds: float = 0) -> Timings:
    """`count` sequential GETs of `path` (or as many as fit in `seconds`), each expected 200."""
    timings = Timings()
    deadline = time.monotonic() + seconds
    while len(timings.seconds) < count or (seconds and time.monotonic() < deadline):
        took, answer = api.timed(client_id, path)
        if answer.status_code != 200:
            raise RuntimeError(f"GET {path}: {answer.status_code} {answer.text[:300]}")
        timings.seconds.append(took)
    return timings


@dataclass
class HeavyLoops:
    """--loops threads, each GETting `path` as `client_id` until stopped, counting answers by status."""

    api: Api
    client_id: str
    path: str
    loops: int
    statuses: Counter[int] = field(default_factory=Counter)
    ok: Timings = field(default_factory=Timings)
    _stop: threading.Event = field(default_factory=threading.Event)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def run(self) -> None:
        client = httpx.Client(base_url=str(self.api.http.base_url), timeout=120)
        headers = self.api.as_client(self.client_id)
        while not self._stop.is_set():
            begun = time.perf_counter()
            answer = client.get(self.path, headers=headers)
            with self._lock:
                self.statuses[answer.status_code] += 1
                if answer.status_code == 200:
                    self.ok.seconds.append(time.perf_counter() - begun)
            if answer.status_code == 429:  # as a client told Retry-After would, but sooner: keep the pressure
                time.sleep(0.05)

    @contextlib.contextmanager
    def running(self) -> Any:
        threads = [threading.Thread(target=self.run, daemon=True) for _ in range(self.loops)]
        for thread in threads:
            thread.start()
        try:
            yield self
        finally:
            self._stop.set()
            for thread in threads:
                thread.join()


def measure(args: argparse.Namespace, url: str, directory: Path) -> None:
    settings = directory / "settings.toml"
    bench_settings(settings)
    command = [str(VENV_BIN / "broker-ledger"), "serve", "--workers", "1", "--port", str(free_port())]
    command += ["--settings", str(settings)]
    env = server_env(url, directory / "var")
    with running(command, env, directory / "server.log", "/health") as server:
        api = Api(server.base_url, directory / "var")
        now = datetime.now(UTC)
        week = reconciliation_path(now - timedelta(days=4), now + timedelta(days=3))
        note("partner demo: 3 transactions over HTTP")
        small_partner(api)
        floor = timed_series(api, None, "/health", seconds=args.seconds / 3)
        alone = timed_series(api, "demo-auditor", week, count=ALONE_RUNS)
        demo_answer = api.call("demo-auditor", "GET", week)
        note(f"partner other: {args.events} events through the store")
        begun = time.perf_counter()
        head = fill_other(url, args.events, now - timedelta(days=3), timedelta(days=2))
        written = time.perf_counter() - begun
        caught_up(url, head)
        as_in_service(url)
        time.sleep(2)  # the server's last pages and callbacks' work done
        after = timed_series(api, "demo-auditor", week, count=ALONE_RUNS)
        assert api.call("demo-auditor", "GET", week) == demo_answer, "demo's reconciliation changed"
        year = reconciliation_path(now - timedelta(days=366), now)
        other = timed_series(api, "other-operator", year, count=5)
        other_body = api.timed("other-operator", year)[1]
        rss_before = rss_mb((server.worker_pids() or [server.popen.pid])[0])
        note(f"{args.loops} heavy loops of partner other for {args.seconds:g} s")
        with HeavyLoops(api, "other-operator", year, args.loops).running() as loops:
            health = timed_series(api, None, "/health", seconds=args.seconds)
            demo_under_load = timed_series(api, "demo-auditor", week, count=20)
        rss_after = rss_mb((server.worker_pids() or [server.popen.pid])[0])
        report(args, head, written, floor, alone, after, other, other_body, loops, health, demo_under_load)
        print(f"server VmRSS: {rss_before:.0f} MB before the heavy loops, {rss_after:.0f} MB after")
        for incident in server.incidents():
            print(f"server log: {incident}")


def report(
    args: argparse.Namespace,
    head: int,
    written: float,
    floor: Timings,
    alone: Timings,
    after: Timings,
    other: Timings,
    other_body: httpx.Response,
    loops: HeavyLoops,
    health: Timings,
    demo_under_load: Timings,
) -> None:
    ratio = after.quantile(0.5) / alone.quantile(0.5)
    body = other_body.json()
    print(
        f"log: {head} events, of which partner other added {args.events} in {written:.0f} s through the store"
    )
    print(f"/health with no load (floor): {floor.ms()}")
    print(f"demo's reconciliation (3 transactions), alone: {alone.ms()}")
    print(f"demo's reconciliation after other's {args.events} events: {after.ms()}")
    print(f"  ratio of medians: {ratio:.2f}x (target at most 1.5x): {'met' if ratio <= 1.5 else 'MISSED'}")
    print(
        f"other's reconciliation of 366 days: {other.ms()}; {body['reportsTotal']} reports, "
        f"{body['differencesTotal']} differences, first page {len(other_body.content) / 1024:.0f} KiB"
    )
    statuses = ", ".join(f"{status}: {count}" for status, count in sorted(loops.statuses.items()))
    print(
        f"{args.loops} heavy loops of other for {args.seconds:g} s: answers {statuses}; 200s {loops.ok.ms()}"
    )
    met = health.quantile(0.99) < 0.100
    print(f"/health during the loops: {health.ms()} (target p99 < 100 ms): {'met' if met else 'MISSED'}")
    print(f"demo's reconciliation during the loops: {demo_under_load.ms()}")


def main() -> None:
    args = parse_args()
    name, url = fresh_database(args.database_url)
    note(f"database {name}")
    try:
        with tempfile.TemporaryDirectory(prefix="bench-isolation-") as directory:
            measure(args, url, Path(directory))
    finally:
        drop_database(args.database_url, name)


if __name__ == "__main__":
    main()
