"""The figures of bench/load.py: what it measured, and the tables it prints (plain text or Markdown)."""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass, field, replace
from pathlib import Path

from bench.cpu import MACHINE, SERVED
from bench.lag import percentile
from bench.load_support import WrkResult
from bench.serial_point import INTERVAL, SerialPoint

SAMPLE_MS = round(INTERVAL * 1000)
HEADLINE_PROJECTION = "readmodels"  # the read models the GET endpoints serve


@dataclass
class LoadRun:
    wrk: WrkResult
    stored_buys: int  # Transaction.Staged events added to the store during the run
    read_rows: int  # rows added to read.transactions, once the projections caught up
    lags_ms: dict[str, list[float]]  # per projection, one lag per observed head
    caught_up: bool
    cpu_seconds: dict[str, float] = field(default_factory=dict)  # per part, from wrk's start to catch-up
    serial: SerialPoint | None = None  # where the buys waited (bench/serial_point.py)

    @property
    def stored_per_second(self) -> float:
        return self.stored_buys / self.wrk.seconds


@dataclass
class FloorRun:
    """bench/floor_app.py under wrk: one event saved per request through the same stack, nothing else."""

    wrk: WrkResult
    stored: int  # events the run added to the floor app's store
    cpu_seconds: dict[str, float]  # per part, during the wrk run
    phase: str = ""  # "before" or "after" the buys' run at the same connection count


@dataclass
class Results:
    settings_changes: list[str] = field(default_factory=list)
    setup_seconds: float = 0.0
    runs: list[LoadRun] = field(default_factory=list)
    rss_mb: dict[int, float] = field(default_factory=dict)
    rebuild_events: int = 0
    rebuild_seconds: float = 0.0
    rebuild_rows_equal: bool = False
    echo: list[WrkResult] = field(default_factory=list)
    floor: list[FloorRun] = field(default_factory=list)
    incidents: dict[str, list[str]] = field(default_factory=dict)  # new server log lines per phase
    kept_log: Path | None = None  # a copy of the server's log, kept when it tells of trouble

    @property
    def worker_restarts(self) -> int:
        return sum("Child process" in line for lines in self.incidents.values() for line in lines)

    def record_incidents(self, phase: str, lines: list[str]) -> None:
        seen = sum(len(earlier) for earlier in self.incidents.values())
        self.incidents[phase] = lines[seen:]

    def run_at(self, connections: int) -> LoadRun:
        return next(run for run in self.runs if run.wrk.connections == connections)

    def echo_at(self, connections: int) -> WrkResult:
        return next(run for run in self.echo if run.connections == connections)

    def floor_at(self, connections: int) -> FloorRun:
        """The floor at `connections`: its runs before and after the buys' run taken together (saves/s over
        their whole time, CPU per save over all their saves), so a drift of the machine's speed during the
        buys' run moves the reference with it."""
        runs = [run for run in self.floor if run.wrk.connections == connections]
        if len(runs) == 1:
            return runs[0]
        statuses: dict[int, int] = {}
        for run in runs:
            for status, count in run.wrk.statuses.items():
                statuses[status] = statuses.get(status, 0) + count
        wrk = replace(
            runs[0].wrk,
            seconds=sum(run.wrk.seconds for run in runs),
            requests=sum(run.wrk.requests for run in runs),
            statuses=statuses,
        )
        cpu = {part: sum(run.cpu_seconds[part] for run in runs) for part in runs[0].cpu_seconds}
        return FloorRun(wrk, sum(run.stored for run in runs), cpu, "before and after")

    @property
    def rebuild_rate(self) -> float:
        return self.rebuild_events / self.rebuild_seconds if self.rebuild_seconds else 0.0


def table(headers: list[str], rows: list[list[str]], align: str, markdown: bool) -> str:
    """Rows under headers; `align` has one letter per column, l or r."""
    if markdown:
        rule = ["---:" if side == "r" else "---" for side in align]
        lines = [headers, rule, *rows]
        return "\n".join("| " + " | ".join(cells) + " |" for cells in lines)
    widths = [max(len(str(cells[i])) for cells in [headers, *rows]) for i in range(len(headers))]

    def line(cells: list[str]) -> str:
        padded = [
            c.rjust(w) if a == "r" else c.ljust(w) for c, w, a in zip(cells, widths, align, strict=True)
        ]
        return "  ".join(padded).rstrip()

    return "\n".join([line(headers), line(["-" * w for w in widths]), *map(line, rows)])


def ms(value: float) -> str:
    return f"{value:.1f}"


def errors_of(wrk: WrkResult) -> tuple[str, str]:
    refused = ", ".join(
        f"{n} x {status}" for status, n in sorted(wrk.statuses.items()) if not 200 <= status < 300
    )
    failed = sum(wrk.socket_errors.values())
    return refused or "0", str(failed)


def buys_table(results: Results, markdown: bool) -> str:
    headers = ["connections", "created buys/s (2xx)", "2xx responses", "buys stored (/s)", "read rows added"]
    headers += ["p50 ms", "p90 ms", "p99 ms", "p99.9 ms", "max ms", "non-2xx", "socket errors"]
    rows = []
    for run in results.runs:
        wrk = run.wrk
        latencies = [ms(wrk.latency_ms[p]) for p in ("p50", "p90", "p99", "p99.9", "max")]
        rows.append(
            [
                str(wrk.connections),
                f"{wrk.ok_per_second:,.0f}",
                f"{wrk.ok:,}",
                f"{run.stored_buys:,} ({run.stored_per_second:,.0f}/s)",
                f"{run.read_rows:,}",
                *latencies,
                *errors_of(wrk),
            ]
        )
    return table(headers, rows, "lrrrrrrrrrrr", markdown)


def echo_table(results: Results, markdown: bool) -> str:
    headers = ["connections", "echo req/s (2xx)", "p50 ms", "p90 ms", "p99 ms", "max ms", "non-2xx"]
    headers.append("socket errors")
    rows = [
        [
            str(wrk.connections),
            f"{wrk.ok_per_second:,.0f}",
            *(ms(wrk.latency_ms[p]) for p in ("p50", "p90", "p99", "max")),
            *errors_of(wrk),
        ]
        for wrk in results.echo
    ]
    return table(headers, rows, "lrrrrrrr", markdown)


def floor_table(results: Results, markdown: bool) -> str:
    parts = list(results.floor[0].cpu_seconds) if results.floor else []
    headers = ["connections", "run", "saves/s (2xx)", "events stored", "p50 ms", "p99 ms", "non-2xx"]
    headers += [f"{part} ms/save" for part in parts]
    rows = [
        [
            str(run.wrk.connections),
            f"{run.phase} the buys" if run.phase else "-",
            f"{run.wrk.ok_per_second:,.0f}",
            f"{run.stored:,}",
            ms(run.wrk.latency_ms["p50"]),
            ms(run.wrk.latency_ms["p99"]),
            errors_of(run.wrk)[0],
            *(f"{1000 * run.cpu_seconds[part] / max(run.stored, 1):.2f}" for part in parts),
        ]
        for run in results.floor
    ]
    return table(headers, rows, "ll" + "r" * (len(headers) - 2), markdown)


def cpu_table(results: Results, markdown: bool) -> str:
    parts = list(results.runs[0].cpu_seconds) if results.runs else []
    headers = ["connections", "buys stored", *(f"{part} ms/buy" for part in parts)]
    rows = [
        [
            str(run.wrk.connections),
            f"{run.stored_buys:,}",
            *(f"{1000 * run.cpu_seconds[part] / max(run.stored_buys, 1):.2f}" for part in parts),
        ]
        for run in results.runs
    ]
    return table(headers, rows, "l" + "r" * (len(headers) - 1), markdown)


def lag_table(results: Results, markdown: bool) -> str:
    headers = ["connections", "projection", "heads observed", "lag p50 ms", "lag p99 ms", "lag max ms"]
    headers.append("caught up")
    rows = []
    for run in results.runs:
        for name, lags in run.lags_ms.items():
            figures = [ms(percentile(lags, 50)), ms(percentile(lags, 99)), ms(max(lags, default=0.0))]
            caught_up = "yes" if run.caught_up else "NO (time-out)"
            rows.append([str(run.wrk.connections), name, str(len(lags)), *figures, caught_up])
    return table(headers, rows, "llrrrrl", markdown)


def serial_table(results: Results, markdown: bool) -> str:
    headers = ["connections", "commits/s", "events per commit", "buys per commit", "lock held per commit ms"]
    headers += ["lock busy (held / sampled)", "one by one / conflicts refused early"]
    headers += ["ceiling buys/s", "measured buys/s", "ceiling / measured"]
    rows = []
    for run in results.runs:
        point = run.serial
        if point is None:
            continue
        measured = run.stored_per_second
        rows.append(
            [
                str(run.wrk.connections),
                f"{point.commits_per_second:,.0f}",
                f"{point.events_per_commit:.1f}",
                f"{point.buys_per_commit:.2f}",
                f"{point.held_ms:.3f}",
                f"{point.busy_share:.0f} % / {point.sampled_busy_share:.0f} %",
                f"{point.counters.one_by_one:,.0f} / {point.counters.conflicts:,.0f}",
                f"{point.ceiling:,.0f}",
                f"{measured:,.0f}",
                f"{point.ceiling / measured:.1f}x" if measured else "n/a",
            ]
        )
    return table(headers, rows, "l" + "r" * (len(headers) - 1), markdown)


def waits_table(results: Results, markdown: bool) -> str:
    shown = ("CPU", "Lock", "LWLock", "IO", "Client", "IPC")
    headers = ["connections", "backends", "active (mean)", *(f"{kind} %" for kind in shown), "other %"]
    headers.append("most sampled (type:event %)")
    rows = []
    for run in results.runs:
        if run.serial is None:
            continue
        samples = run.serial.samples
        for side in ("api", "projections"):
            shares = samples.shares(side)
            other = sum(share for kind, share in shares.items() if kind not in shown)
            top = ", ".join(f"{name} {share:.0f}" for name, share in samples.top(side))
            rows.append(
                [
                    str(run.wrk.connections),
                    side,
                    f"{samples.active(side):.1f}",
                    *(f"{shares.get(kind, 0.0):.0f}" for kind in shown),
                    f"{other:.0f}",
                    top or "-",
                ]
            )
    return table(headers, rows, "ll" + "r" * (len(headers) - 3) + "l", markdown)


CEILING_TIMES = 4  # the serial point's ceiling at least this many times the buys measured (issue 26)
FLOOR_SHARE = 40  # % of the floor's saves/s that created buys must reach (issue 15)
CPU_PER_BUY_MS = {"high": 3.0, "low": 3.5}  # machine CPU per created buy at the most / fewest connections
P99_LOW_MS = 40
LAG_P99_MS = 100
REBUILD_EVENTS_PER_SECOND = 20_000
RSS_MB = 200


def cpu_ms(cpu_seconds: dict[str, float], part: str, count: int) -> float:
    return 1000 * cpu_seconds.get(part, 0.0) / max(count, 1)


def served_ms(cpu_seconds: dict[str, float], count: int) -> float:
    """The machine's CPU per unit less the benchmark's instruments (`bench.cpu.SERVED`; the whole machine's
    for runs measured without them)."""
    return cpu_ms(cpu_seconds, SERVED if SERVED in cpu_seconds else MACHINE, count)


def summary_rows(results: Results, high: int, low: int) -> list[tuple[str, str, str, bool | None]]:
    """The issue's table: (figure, measured, target, met; None where the figure is a reference)."""
    run_high, run_low, floor_run = results.run_at(high), results.run_at(low), results.floor_at(high)
    buys, floor = run_high.wrk.ok_per_second, floor_run.wrk.ok_per_second
    share = 100 * buys / floor if floor else 0.0
    floor_ms = served_ms(floor_run.cpu_seconds, floor_run.stored)
    buy_ms = {
        key: served_ms(run.cpu_seconds, run.stored_buys)
        for key, run in (("high", run_high), ("low", run_low))
    }
    split = " / ".join(
        f"{cpu_ms(run_high.cpu_seconds, part, run_high.stored_buys):.2f}"
        for part in run_high.cpu_seconds
        if part not in (MACHINE, SERVED)
    )
    p99_low = run_low.wrk.latency_ms["p99"]
    lags = run_high.lags_ms.get(HEADLINE_PROJECTION, [])
    lag_p99 = percentile(lags, 99)
    rss = max(results.rss_mb.values(), default=0.0)
    failures = sum(run.wrk.refused + sum(run.wrk.socket_errors.values()) for run in results.runs)
    parts = " / ".join(part.split()[0] for part in run_high.cpu_seconds if part not in (MACHINE, SERVED))
    return [
        (
            f"created buys/s at {high} connections",
            f"{buys:,.0f}",
            f">= {FLOOR_SHARE} % of the floor",
            share >= FLOOR_SHARE,
        ),
        (
            f"the floor, one-event saves/s at {high} connections",
            f"{floor:,.0f} ({floor_ms:.2f} ms machine CPU per save, less the instruments)",
            "(the reference)",
            None,
        ),
        ("buys as a share of the floor", f"{share:.1f} %", f">= {FLOOR_SHARE} %", share >= FLOOR_SHARE),
        (
            f"machine CPU per created buy less the benchmark's instruments, {high} / {low} connections",
            f"{buy_ms['high']:.2f} / {buy_ms['low']:.2f} ms",
            f"<= {CPU_PER_BUY_MS['high']} / <= {CPU_PER_BUY_MS['low']} ms",
            buy_ms["high"] <= CPU_PER_BUY_MS["high"] and buy_ms["low"] <= CPU_PER_BUY_MS["low"],
        ),
        (f"split at {high} connections: {parts}", f"{split} ms", "", None),
        (
            f"p99 of a created buy at {low} connections",
            f"{p99_low:.1f} ms",
            f"< {P99_LOW_MS} ms",
            p99_low < P99_LOW_MS,
        ),
        (
            f"ReadModels lag p99 at {high} connections ({len(lags)} heads)",
            f"{lag_p99:.1f} ms" if lags else "n/a",
            f"< {LAG_P99_MS} ms",
            bool(lags) and run_high.caught_up and lag_p99 < LAG_P99_MS,
        ),
        ceiling_row(run_high),
        (
            "rebuild of every projection from the first event",
            f"{results.rebuild_rate:,.0f} events/s",
            f">= {REBUILD_EVENTS_PER_SECOND:,} events/s",
            results.rebuild_rate >= REBUILD_EVENTS_PER_SECOND,
        ),
        (
            f"RSS per API worker (largest of {len(results.rss_mb)})",
            f"{rss:.0f} MB" if results.rss_mb else "n/a",
            f"< {RSS_MB} MB (keep)",
            bool(results.rss_mb) and rss < RSS_MB,
        ),
        ("refused or failed buy requests (all runs)", f"{failures:,}", "0", failures == 0),
        (
            "workers restarted by uvicorn (whole benchmark)",
            str(results.worker_restarts),
            "0",
            results.worker_restarts == 0,
        ),
    ]


def ceiling_row(run: LoadRun) -> tuple[str, str, str, bool | None]:
    """The serial point's ceiling against the buys measured (`bench.serial_point`)."""
    figure = f"serial point's ceiling at {run.wrk.connections} connections (events table's lock)"
    point, measured = run.serial, run.stored_per_second
    if point is None or not point.ceiling or not measured:
        return figure, "n/a", f">= {CEILING_TIMES}x the buys stored/s", False
    times = point.ceiling / measured
    shown = f"{point.ceiling:,.0f} buys/s = {times:.1f}x the {measured:,.0f} stored/s"
    return figure, shown, f">= {CEILING_TIMES}x the buys stored/s", times >= CEILING_TIMES


def verdict(met: bool | None) -> str:
    return "" if met is None else "MET" if met else "NOT MET"


def summary_table(results: Results, high: int, low: int, markdown: bool) -> str:
    rows = [
        [figure, measured, target, verdict(met)]
        for figure, measured, target, met in summary_rows(results, high, low)
    ]
    return table(["figure", "measured", "target", "verdict"], rows, "lrll", markdown)


def print_results(results: Results, args: argparse.Namespace) -> None:
    high, low = max(args.connections), min(args.connections)
    runners = f" ({args.projection_processes} processes)" if args.projections == "separate" else ""
    print(
        f"broker-ledger serve: {args.workers} workers, projections {args.projections}{runners}, "
        f"{args.customers} customers, wrk -t1 for {args.seconds} s per run, {os.cpu_count()} CPUs, "
        f"group commit {os.environ.get('BROKER_LEDGER_GROUP_COMMIT', 'on')}, "
        f"{'no Idempotency-Key' if getattr(args, 'without_keys', False) else 'an Idempotency-Key per buy'}"
    )
    print(f"setup: {args.customers} customers with accounts over HTTP in {results.setup_seconds:.1f} s")
    print(f"bench settings: {'; '.join(results.settings_changes)}")
    sections = [
        ("Created buys: POST /brokerbuy, committed at once", buys_table(results, args.markdown)),
        ("Ceiling: bench/echo_app.py, same uvicorn options and workers", echo_table(results, args.markdown)),
        (
            "Floor: bench/floor_app.py, one event saved per request through litestar and eventsourcing "
            "(group commit), same options and workers, nothing else; run just before and just after the buys "
            "at each connection count, the two taken together as the reference",
            floor_table(results, args.markdown),
        ),
        (
            "Serial point: the events table's lock, held by each group commit (bench/serial_point.py); "
            "ceiling = buys per commit / time held per commit",
            serial_table(results, args.markdown),
        ),
        (
            f"Where the service's connections waited: pg_stat_activity sampled every "
            f"{SAMPLE_MS} ms during each run, shares of the active backends' samples (CPU: no wait)",
            waits_table(results, args.markdown),
        ),
        ("Projection lag (polled every 5 ms, see bench/lag.py)", lag_table(results, args.markdown)),
        (
            "CPU per stored buy, from wrk's start until the projections caught up (bench/cpu.py)",
            cpu_table(results, args.markdown),
        ),
    ]
    for title, text in sections:
        print(f"\n{title}\n{text}")
    print_details(results)
    print(f"\nSummary\n{summary_table(results, high, low, args.markdown)}")


def print_details(results: Results) -> None:
    projections = len(results.runs[0].lags_ms) if results.runs else 0
    unchanged = "yes" if results.rebuild_rows_equal else "NO"
    print(
        f"\nRebuild: broker-ledger projections rebuild ({projections} projections) over "
        f"{results.rebuild_events:,} events in {results.rebuild_seconds:.2f} s "
        f"= {results.rebuild_rate:,.0f} events/s; read.transactions rows unchanged by it: {unchanged}"
    )
    workers = ", ".join(f"worker {pid}: {mb:.0f} MB" for pid, mb in results.rss_mb.items())
    younger = " (a restarted worker did not see the whole load)" if results.worker_restarts else ""
    print(f"RSS after the load: {workers or 'no worker processes found'}{younger}")
    print_incidents(results)
    for run in results.runs:
        if run.wrk.first_refusal:
            print(f"first refused response at {run.wrk.connections} connections: {run.wrk.first_refusal}")


def print_incidents(results: Results) -> None:
    if not any(results.incidents.values()):
        print("server log: no worker restarted, no errors")
        return
    for phase, found in results.incidents.items():
        restarts = sum("Child process" in item for item in found)
        if found:
            print(f"server log, {phase}: {restarts} worker restarts; {len(found)} incidents, the first ones:")
            for item in found[:4]:
                print("\n".join(f"    {line[:160]}" for line in item.splitlines()[-4:]))
    print(f"the whole server log is kept in {results.kept_log}")


def scaling_rows(sweep: list[tuple[int, Results]], high: int) -> list[list[str]]:
    rows = []
    for workers, results in sweep:
        run, floor_run = results.run_at(high), results.floor_at(high)
        buys, floor = run.wrk.ok_per_second, floor_run.wrk.ok_per_second
        lag = percentile(run.lags_ms.get(HEADLINE_PROJECTION, []), 99)
        point = run.serial
        rows.append(
            [
                str(workers),
                str(high),
                f"{buys:,.0f}",
                f"{floor:,.0f}",
                f"{100 * buys / floor if floor else 0:.1f} %",
                f"{served_ms(run.cpu_seconds, run.stored_buys):.2f} ms",
                f"{lag:,.0f} ms",
                f"{point.buys_per_commit:.2f}" if point else "n/a",
                f"{point.held_ms:.3f} ms" if point else "n/a",
                f"{point.busy_share:.0f} %" if point else "n/a",
                f"{point.ceiling:,.0f}" if point else "n/a",
                f"{results.rebuild_rate:,.0f}",
            ]
        )
    return rows


def print_scaling(sweep: list[tuple[int, Results]], args: argparse.Namespace) -> None:
    """One table over the sweep's worker counts, at the most connections: the issue's scaling figures and
    the serial point's."""
    high = max(args.connections)
    headers = ["API workers", "connections", "created buys/s", "floor saves/s", "share of floor"]
    headers += ["machine CPU per buy", "ReadModels lag p99", "buys per commit", "lock held per commit"]
    headers += ["lock busy", "ceiling buys/s", "rebuild events/s"]
    rows = scaling_rows(sweep, high)
    if len(sweep) > 1:
        first, last = sweep[0], sweep[-1]
        growth = last[1].run_at(high).wrk.ok_per_second / max(first[1].run_at(high).wrk.ok_per_second, 1)
        print(f"\nbuys/s at {last[0]} workers / at {first[0]} workers: {growth:.2f}")
    print(f"\nScaling ({os.cpu_count()} CPUs)\n{table(headers, rows, 'r' * len(headers), args.markdown)}")
