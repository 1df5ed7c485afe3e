"""Load benchmark of the real server: created buys per second, latency, projection lag, rebuild speed,
memory per worker, the ceiling of the HTTP stack and the floor of a stored request, side by side with
their targets.

Run (wrk must be installed: `apt-get install wrk`):

    .venv/bin/python bench/load.py [--customers 2000] [--seconds 15] [--workers 2|2,8,14] [--connections 64,8]
                                   [--database-url postgresql://postgres@127.0.0.1:5432/postgres] [--markdown]
                                   [--projections in-process|separate] [--projection-processes N|auto]
                                   [--profile]

What it does, in order:
1. Creates a fresh database `bench_load_<random>` on the PostgreSQL of --database-url (dropped at the end)
   and writes the benchmark's settings into a temporary directory: the demo settings plus a trust level
   `Bench` whose limits are never reached, and every rate limit raised very high (left enabled, so its
   cost is part of the figures). Starts `broker-ledger serve --workers N` in its own process group with
   DATABASE_URL, BROKER_LEDGER_VAR (a private var dir: credentials and client secrets) and --settings;
   the projections run inside the server, as they do by default.
2. Takes a token the OAuth2 way (POST /connect/token with the secret generated into var/) and registers
   --customers customers (ACTIVE, trust level Bench) with a BTC account each, over HTTP, concurrently.
   Then buys for 3 s (not measured), so that the tables buys write hold rows when they are analyzed.
3. For each connection count (after a VACUUM (ANALYZE), as autovacuum keeps a store in service, and a
   CHECKPOINT, so that no run pays for the writes before it), runs wrk
   (one thread, bench/wrk_buy.lua) for --seconds: POST /brokerbuy
   without "stage" (the buy is committed at once, status Sending) of 20 EUR, cycling over the customers,
   each request with a unique Idempotency-Key (none with --without-keys). Created buys/s = 2xx responses /
   wrk's duration; cross-checked with the `Transaction.Staged` events added to ledger.ledger_events during
   the run, and with the rows added to read.transactions once the projections have caught up (both also
   count the requests still in flight when wrk stopped, up to one per connection). Latency percentiles
   are wrk's.
4. Projection lag, sampled during each run (method in bench/lag.py): every 5 ms the head of the event log
   and each projection's tracking position are read; each new head id is stamped when first seen and again
   when a projection's position first reaches it; lag = the difference. After wrk stops, sampling goes on
   until every projection has reached the last head (so the slowest events are counted), and each run
   starts only once the projections have processed everything before it. The target applies to
   ReadModels (the read models that GET endpoints serve) during the run with the most connections.
   CPU seconds of the API workers, of a separate projections process (and its runners) and of PostgreSQL
   (bench/cpu.py), from wrk's start until the projections caught up, are divided by the buys stored: CPU ms
   per buy. The benchmark's own process (its samplers' threads) and its samplers' PostgreSQL backends are a
   part of their own, the instruments, and the machine's CPU per buy that the summary judges is the
   machine's less the instruments; both are printed. The floor runs under the same samplers (step 7).
   The serial point (bench/serial_point.py), during wrk's run: the group committer's commits, the time
   each held the events table's lock and the events it wrote (the API's /metrics before and after),
   and what the service's connections waited for (pg_stat_activity and pg_locks sampled every 10 ms); from
   those, the buys per second the lock allows (buys per commit / time held per commit), beside the buys.
5. After the runs: VmRSS of each uvicorn worker (children of the server process, /proc/<pid>/status).
   Trouble in the server's log (a worker restarted by uvicorn's supervisor, errors) is printed per phase.
   Then the server is stopped and `broker-ledger projections rebuild` (every projection, from the first
   event) is timed: events/s = events in the store / wall time of the command (including its start-up).
6. The ceiling: bench/echo_app.py (litestar, a POST that decodes a small msgspec body and echoes it) under
   uvicorn with the options and worker count of `broker-ledger serve`, driven by the same wrk script.
7. The floor: bench/floor_app.py, the same stack storing each request as one new aggregate's one event
   through eventsourcing and the service's event-store settings (group commit), with nothing else, on the
   benchmark's database; saves/s and CPU ms per save of its workers and PostgreSQL. A created buy does
   all of that and much more, so buys/s cannot pass this figure on the same machine. The floor app is up
   from the start, and runs just before and just after the buys at each connection count (step 3): the
   two runs together are the reference of that count, so a drift of the shared machine's speed in the
   minutes of a benchmark (seen: 30-50 %) moves the buys and their reference alike. The lag and wait
   samplers of step 4 run during the floor's runs too (idle, sampling what does not move): they take a
   tenth of a core or more, which the buys had shared with them and the floor had not.

With `--workers 2,8,14` the whole benchmark runs once per worker count (each on a fresh database, with its
own floor and ceiling), and a scaling table follows: buys/s, the floor, the share, CPU per buy, ReadModels'
lag, the serial point's figures and the rebuild, per worker count. `--projections separate` runs
`broker-ledger projections run --processes N` (`--projection-processes`, auto by default: a runner per 4
cores, at most one per projection).

With `--profile`, py-spy records the API workers during the run with the most connections (GIL-holding
samples only) and the split of their Python is printed after it (bench/profile_split.py).

Progress goes to stderr; the figures to stdout. --markdown prints the tables as Markdown (for
docs/performance.md). The load generator shares the machine with the server and PostgreSQL, so the figures
are those of this machine at the time of the run.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from bench.cpu import INSTRUMENTS, CpuMeter
from bench.lag import LagSampler, tracking_tables
from bench.load_report import FloorRun, LoadRun, Results, print_results, print_scaling
from bench.load_support import (
    CUSTOMER_ADDRESS,
    ROOT,
    VENV_BIN,
    Poller,
    Process,
    WrkResult,
    as_in_service,
    bench_settings,
    broker_token,
    children,
    create_customers,
    drop_database,
    free_port,
    fresh_database,
    rss_mb,
    run_wrk,
    running,
    scalar,
    server_env,
)
from bench.profile_split import Profiler, report
from bench.serial_point import SerialPoint, WaitSampler, commit_counters
from projections.catalog import PROJECTIONS

DEFAULT_DATABASE_URL = "postgresql://postgres@127.0.0.1:5432/postgres"
CUSTOMER_PREFIX = "bench-"
FIAT_VALUE = "20"
WARM_UP_SECONDS = 3  # a round of the warm-up
WARM_UP_BUYS = 5000  # the warm-up ends once the store holds this many buys, or after --seconds of it
COUNT_BUYS = "SELECT count(*) FROM ledger.ledger_events WHERE topic = 'domain.transaction:Transaction.Staged'"
COUNT_READ_ROWS = "SELECT count(*) FROM read.transactions"
COUNT_EVENTS = "SELECT count(*) FROM ledger.ledger_events"
COUNT_FLOOR_EVENTS = "SELECT count(*) FROM floor.orders_events"
CATCH_UP_TIMEOUT = 900  # seconds
STARTED = time.monotonic()


def note(message: str) -> None:
    print(f"[{time.monotonic() - STARTED:6.1f} s] {message}", file=sys.stderr, flush=True)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--customers", type=int, default=2000)
    parser.add_argument("--seconds", type=int, default=15, help="duration of each wrk run")
    parser.add_argument(
        "--workers",
        default="2",
        help="API workers; comma-separated for a sweep (e.g. 2,8,14): one whole benchmark each, on a fresh "
        "database, then one scaling table",
    )
    parser.add_argument("--connections", default="64,8", help="comma-separated, one wrk run each")
    parser.add_argument(
        "--database-url", default=DEFAULT_DATABASE_URL, help="a server to create a database on"
    )
    parser.add_argument(
        "--projections",
        choices=("in-process", "separate"),
        default="in-process",
        help="run the projections in the API workers (serve's default) or in their own process "
        "(serve --no-projections beside `broker-ledger projections run`, as compose.yaml does)",
    )
    parser.add_argument(
        "--projection-processes",
        default=os.environ.get("BENCH_PROJECTION_PROCESSES", "auto"),
        help="with --projections separate: `projections run --processes` (a number, or auto); "
        "default: $BENCH_PROJECTION_PROCESSES or auto",
    )
    parser.add_argument("--markdown", action="store_true", help="print the tables as Markdown")
    parser.add_argument(
        "--profile",
        action="store_true",
        help="profile the API workers with py-spy (GIL-holding samples) during the run with the most "
        "connections, and print where their Python goes (bench/profile_split.py)",
    )
    parser.add_argument(
        "--without-keys",
        action="store_true",
        help="the measured buys carry no Idempotency-Key (a key's cost: the difference from a run with keys)",
    )
    args = parser.parse_args()
    args.connections = [int(count) for count in args.connections.split(",") if count.strip()]
    args.sweep = [int(count) for count in args.workers.split(",") if count.strip()]
    return args


def main() -> None:
    args = parse_args()
    # a terminated benchmark still stops its servers and drops its database (the `finally`s run)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    if shutil.which("wrk") is None:
        sys.exit("wrk is not installed; it drives the load. Install it with: apt-get install wrk")
    sweep: list[tuple[int, Results]] = []
    for workers in args.sweep:
        args.workers = workers
        with tempfile.TemporaryDirectory(prefix="bench-load-") as temporary:
            name, url = fresh_database(args.database_url)
            note(f"database {name}")
            try:
                results = measure(args, url, Path(temporary))
            except RuntimeError as error:
                sys.exit(f"benchmark failed: {error}")
            finally:
                drop_database(args.database_url, name)
        print_results(results, args)
        sweep.append((workers, results))
    if len(sweep) > 1:
        print_scaling(sweep, args)


def measure(args: argparse.Namespace, url: str, directory: Path) -> Results:
    results = Results()
    settings = directory / "settings.toml"
    results.settings_changes = bench_settings(settings)
    env = server_env(url, directory / "var")
    with floor_server(args, url, directory) as floor:
        measure_ledger(args, url, settings, env, directory, results, floor)
    measure_rebuild(url, settings, env, results)
    results.echo = measure_echo(args, directory)
    return results


def measure_ledger(
    args: argparse.Namespace,
    url: str,
    settings: Path,
    env: dict[str, str],
    directory: Path,
    results: Results,
    floor: Process,
) -> None:
    """The service's runs, each between two runs of the floor at the same connection count (the floor app
    is up all along, idle between its runs): a drift of the shared machine's speed then moves the buys and
    their reference alike."""
    port = free_port()
    command = [str(VENV_BIN / "broker-ledger"), "serve", "--workers", str(args.workers), "--port", str(port)]
    command += ["--settings", str(settings)]
    note(f"starting broker-ledger serve with {args.workers} workers, projections {args.projections}")
    cpu_parts: dict[str, Callable[[], list[int]]] = {}
    with contextlib.ExitStack() as stack:
        if args.projections == "separate":
            command.append("--no-projections")
            runners = args.projection_processes
            projections = stack.enter_context(projection_process(env, settings, directory, runners))
            cpu_parts["projections process"] = lambda: [projections.pid, *children(projections.pid)]
        server = stack.enter_context(running(command, env, directory / "server.log", "/health"))
        cpu_parts = {"API workers": server.worker_pids, **cpu_parts}
        token = broker_token(server.base_url, directory / "var")
        note(f"creating {args.customers} customers with accounts")
        begun = time.perf_counter()
        codes = [f"{CUSTOMER_PREFIX}{index}" for index in range(args.customers)]
        create_customers(server.base_url, token, codes)
        results.setup_seconds = time.perf_counter() - begun
        results.record_incidents("start and setup", server.incidents())
        tables = tracking_tables(url, len(PROJECTIONS))
        warm_up(server, url, token, args)
        for connections in args.connections:
            results.floor.append(floor_run(floor, url, connections, args, "before", tables=tables))
            results.runs.append(load_run(server, url, token, tables, connections, args, cpu_parts))
            results.record_incidents(f"run at {connections} connections", server.incidents())
            results.floor.append(floor_run(floor, url, connections, args, "after", tables=tables))
        results.rss_mb = {pid: rss_mb(pid) for pid in server.worker_pids()}
        note("stopping the server")
    if results.worker_restarts or any(results.incidents.values()):
        results.kept_log = Path(tempfile.gettempdir()) / f"{directory.name}-server.log"
        shutil.copyfile(directory / "server.log", results.kept_log)


@contextlib.contextmanager
def projection_process(
    env: dict[str, str], settings: Path, directory: Path, runners: str
) -> Iterator[subprocess.Popen[bytes]]:
    """`broker-ledger projections run --processes <runners>` in its own process group, stopped at the end."""
    command = [str(VENV_BIN / "broker-ledger"), "projections", "run", "--processes", runners]
    with (directory / "projections.log").open("wb") as output:
        process = subprocess.Popen(
            command,
            cwd=ROOT,
            env={**env, "BROKER_LEDGER_SETTINGS": str(settings)},
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        yield process
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)


def load_run(
    server: Process,
    url: str,
    token: str,
    tables: list[str],
    connections: int,
    args: argparse.Namespace,
    cpu_parts: dict[str, Callable[[], list[int]]],
    tag: str = "",
) -> LoadRun:
    """One measured run of the buys; `tag` sets its Idempotency-Keys apart from those of another run at the
    same connection count on the same database (bench/replication_cost.py's rounds), which would replay."""
    settle(url, tables)
    as_in_service(url)
    buys_before, rows_before = scalar(url, COUNT_BUYS), scalar(url, COUNT_READ_ROWS)
    note(f"wrk: POST /brokerbuy, {connections} connections, {args.seconds} s")
    sampler = LagSampler(url, tables).start()
    waits = WaitSampler(url).start()
    counters = commit_counters(server.base_url)
    cpu = CpuMeter({**cpu_parts, **instruments(sampler, waits)}).start()
    profiler = None
    if getattr(args, "profile", False) and connections == max(args.connections):
        profiler = Profiler(
            server.worker_pids(), args.seconds, Path(tempfile.mkdtemp(prefix="bench-profile-"))
        )
    keys = f"load-{os.getpid()}-c{connections}{tag}"
    script_args = [CUSTOMER_PREFIX, str(args.customers), keys, FIAT_VALUE]
    script_args += [CUSTOMER_ADDRESS, "no-keys" if args.without_keys else "keys"]
    wrk = run_wrk(f"{server.base_url}/brokerbuy", token, args.seconds, connections, script_args)
    counters = commit_counters(server.base_url) - counters
    waits.stop()
    if profiler is not None:
        print("\n".join(report(profiler.finish())), flush=True)
    note("waiting for the projections to process every event of the run")
    caught_up = sampler.wait_caught_up(timeout=CATCH_UP_TIMEOUT)
    sampler.stop()
    cpu_seconds = cpu.stop()
    stored_buys = scalar(url, COUNT_BUYS) - buys_before
    return LoadRun(
        wrk=wrk,
        stored_buys=stored_buys,
        read_rows=scalar(url, COUNT_READ_ROWS) - rows_before,
        lags_ms=sampler.lags_ms(),
        caught_up=caught_up,
        cpu_seconds=cpu_seconds,
        serial=SerialPoint(counters, stored_buys, wrk.seconds, waits.found),
    )


def warm_up(server: Process, url: str, token: str, args: argparse.Namespace) -> None:
    """Buys, not measured, in rounds of a few seconds each followed by an ANALYZE (as autovacuum would
    make), until the store holds WARM_UP_BUYS buys or for --seconds: a store in service is not seconds
    old. Analyzed while a table holds a few hundred rows, a buy's statements by key are planned as
    sequential scans of it, and stay so while a run multiplies its rows (prepared statements keep their
    plan until the next ANALYZE); from a few thousand rows on, they are index scans, as they stay."""
    connections = max(args.connections)
    rounds = max(1, args.seconds // WARM_UP_SECONDS)
    for round_ in range(rounds):
        if scalar(url, COUNT_BUYS) >= WARM_UP_BUYS:
            return
        seconds = min(WARM_UP_SECONDS, args.seconds)
        note(f"warm-up: POST /brokerbuy, {connections} connections, {seconds} s (not measured)")
        keys = f"warm-{os.getpid()}-{round_}"  # new keys each round: a key used before would replay
        script_args = [CUSTOMER_PREFIX, str(args.customers), keys, FIAT_VALUE, CUSTOMER_ADDRESS]
        run_wrk(f"{server.base_url}/brokerbuy", token, seconds, connections, script_args)
        as_in_service(url)


def settle(url: str, tables: list[str]) -> None:
    """Waits until the projections have processed the setup (or the previous run), so that each run's lag
    is measured from a projection that is up to date."""
    begun = time.monotonic()
    sampler = LagSampler(url, tables).start()
    settled = sampler.wait_caught_up(quiet=0.2, timeout=CATCH_UP_TIMEOUT)
    sampler.stop()
    if not settled:
        raise RuntimeError(f"the projections did not catch up within {CATCH_UP_TIMEOUT} s")
    if time.monotonic() - begun > 2:
        note(f"the projections caught up in {time.monotonic() - begun:.0f} s")


def measure_rebuild(url: str, settings: Path, env: dict[str, str], results: Results) -> None:
    """Times `broker-ledger projections rebuild` (the server is stopped, so no projection is running)."""
    as_in_service(url)
    results.rebuild_events = scalar(url, COUNT_EVENTS)
    rows_before = scalar(url, COUNT_READ_ROWS)
    note(f"broker-ledger projections rebuild over {results.rebuild_events} events")
    command = [str(VENV_BIN / "broker-ledger"), "projections", "rebuild"]
    begun = time.perf_counter()
    environment = {**env, "BROKER_LEDGER_SETTINGS": str(settings)}
    finished = subprocess.run(command, cwd=ROOT, env=environment, capture_output=True, text=True)
    results.rebuild_seconds = time.perf_counter() - begun
    if finished.returncode != 0:
        raise RuntimeError(f"projections rebuild failed: {finished.stdout[-1500:]}{finished.stderr[-1500:]}")
    results.rebuild_rows_equal = scalar(url, COUNT_READ_ROWS) == rows_before


def measure_echo(args: argparse.Namespace, directory: Path) -> list[WrkResult]:
    port = free_port()
    command = [sys.executable, "-m", "bench.echo_app", "--port", str(port), "--workers", str(args.workers)]
    note(f"starting the echo app with {args.workers} workers")
    with running(command, dict(os.environ), directory / "echo.log", "/brokerbuy") as echo:
        runs = []
        for connections in args.connections:
            note(f"wrk: echo, {connections} connections, {args.seconds} s")
            script_args = [CUSTOMER_PREFIX, str(args.customers), f"echo-c{connections}", FIAT_VALUE]
            runs.append(
                run_wrk(
                    f"{echo.base_url}/brokerbuy",
                    "none",
                    args.seconds,
                    connections,
                    [*script_args, CUSTOMER_ADDRESS],
                )
            )
        return runs


@contextlib.contextmanager
def floor_server(args: argparse.Namespace, url: str, directory: Path) -> Iterator[Process]:
    """bench/floor_app.py on the benchmark's database (its own schema), up for the whole measurement."""
    port = free_port()
    command = [sys.executable, "-m", "bench.floor_app", "--port", str(port), "--workers", str(args.workers)]
    note(f"starting the floor app with {args.workers} workers")
    env = {**os.environ, "DATABASE_URL": url}
    with running(command, env, directory / "floor.log", "/health") as floor:
        yield floor


def instruments(*samplers: Poller) -> dict[str, Callable[[], list[int]]]:
    """The CPU meter's part of the benchmark's instruments: this process and the samplers' backends."""
    return {
        INSTRUMENTS: lambda: [os.getpid(), *(pid for sampler in samplers for pid in sampler.backend_pids())]
    }


def floor_run(
    floor: Process,
    url: str,
    connections: int,
    args: argparse.Namespace,
    phase: str,
    cpu_parts: dict[str, Callable[[], list[int]]] | None = None,
    tables: list[str] | None = None,
) -> FloorRun:
    """One run of the floor: one event saved per request, nothing else; CPU of its workers, of PostgreSQL and
    of the machine, and of `cpu_parts` when given. With the projections' tracking `tables`, the buys'
    samplers run all along (idle, they sample what does not move), so that the floor and the buys share
    the machine with the same instruments: these take a core's tenth or more at 2 cores."""
    note(f"wrk: floor, {connections} connections, {args.seconds} s ({phase} the buys)")
    as_in_service(url)
    stored_before = scalar(url, COUNT_FLOOR_EVENTS)
    samplers = [LagSampler(url, tables).start(), WaitSampler(url).start()] if tables is not None else []
    cpu = CpuMeter(
        {"floor workers": floor.worker_pids, **(cpu_parts or {}), **instruments(*samplers)}
    ).start()
    script_args = [CUSTOMER_PREFIX, str(args.customers), f"floor-c{connections}-{phase}", FIAT_VALUE]
    wrk = run_wrk(
        f"{floor.base_url}/brokerbuy", "none", args.seconds, connections, [*script_args, CUSTOMER_ADDRESS]
    )
    cpu_seconds = cpu.stop()
    for sampler in samplers:
        sampler.stop()
    return FloorRun(wrk, scalar(url, COUNT_FLOOR_EVENTS) - stored_before, cpu_seconds, phase)


if __name__ == "__main__":
    main()
