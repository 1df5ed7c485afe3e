"""`broker-ledger projections run | status | rebuild`.

`run --processes N` starts N runner processes that share the projections (`projections.runners`); with one,
the default, the worker runs in this process, as it always has. `rebuild --processes N` rebuilds the
projections in N processes, a group each (`projections.rebuild.rebuild_apart`), with one progress bar here;
with one, in this process."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Annotated, Literal

import psycopg
from cyclopts import App, Parameter
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeRemainingColumn
from rich.table import Table

from application.logs import configure_logging
from application.store.database import eventsourcing_env
from application.store.log import EVENTS_SCHEMA, LedgerLog
from interface.cli.collector import settle_for_serving
from interface.cli.main import event_store_url
from interface.environment import Environment
from projections import status as projection_status
from projections.base.runner import ProjectionSpec, exclusive
from projections.catalog import PROJECTIONS, by_name
from projections.live import ProjectionWorker, stop_all
from projections.rebuild import Rebuilt, rebuild_apart, rebuild_processes, rebuilding, replay_all
from projections.runners import CORES_PER_RUNNER, Runners, auto_runners

app = App(name="projections", help="Run, inspect and rebuild the read models.")
console = Console()


def _log_app(url: str) -> LedgerLog:
    return LedgerLog(env=eventsourcing_env(url, EVENTS_SCHEMA))


@app.command(name="run")
def run(
    *,
    processes: Annotated[
        int | Literal["auto"],
        Parameter(
            help="Runner processes (each runs a share of the projections and takes over a dead one's); "
            f"auto: min(projections, max(1, CPU cores // {CORES_PER_RUNNER})), so {auto_runners()} here."
        ),
    ] = 1,
) -> int:
    """Run every projection in the foreground until SIGTERM or Ctrl-C (one process in the cluster runs
    each projection at a time; start several for fail-over). With --processes N, N runner processes share
    them: runner i of N leads those at catalog index i, i + N, ..., takes over a dead runner's within a few
    seconds, and a runner that dies is started again."""
    runners = auto_runners() if processes == "auto" else processes
    if runners < 1:
        console.print("[red]--processes: give 1 or more, or auto[/red]")
        return 2
    configure_logging("info")
    environment = Environment.read()
    url = event_store_url(environment)
    stopped = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stopped.set())
    if runners > 1:
        checkpointer = environment.checkpointer()
        Runners(
            url, runners, prepare_runner, page=environment.projection_page, checkpointer=checkpointer
        ).supervise(stopped)
        return 0
    page, checkpointer = environment.projection_page, environment.checkpointer()
    workers = [ProjectionWorker(url, PROJECTIONS, page=page, checkpointer=checkpointer)]
    settle_for_serving()
    for worker in workers:
        worker.start()
    stopped.wait()
    stop_all(workers)
    return 0


def prepare_runner() -> None:
    """What a runner process of `run --processes N` does first: it logs as this command does, and settles
    its collector for serving (`interface.cli.collector`)."""
    configure_logging("info")
    settle_for_serving()


@app.command(name="status")
def status() -> int:
    """Each projection's position in the event log, how far it lags behind (in events, and the age of the
    oldest event it has not applied), whether this cluster runs it, and its last error while it fails.
    Exit 1 when a projection is stalled (a recorded failure, or a lag older than
    BROKER_LEDGER_PROJECTION_STALL_SECONDS), else 0."""
    environment = Environment.read()
    url = event_store_url(environment)
    log_app = _log_app(url)
    try:
        head = log_app.head()
        threshold = environment.stall_seconds
        with psycopg.connect(url, autocommit=True) as conn:
            names = [spec.name for spec in PROJECTIONS]
            states = projection_status.states(conn, names, head, projection_status.event_time(log_app))
    finally:
        log_app.close()
    table = Table("projection", "position", "head", "lag (events)", "lag (s)", "running", "last error")
    for spec, state in zip(PROJECTIONS, states, strict=True):
        with exclusive(url, spec) as free:
            running = "no" if free else "yes"
        table.add_row(
            spec.name,
            str(state.position),
            str(head),
            str(head - state.position),
            f"{state.behind_seconds:.0f}",
            running,
            _last_error(state.failure),
        )
    console.print(table)
    stalled = [state for state in states if state.stalled(threshold)]
    for state in stalled:
        console.print(f"[red]stalled: {state.describe()}[/red]", soft_wrap=True)
    return 1 if stalled else 0


def _last_error(failure: projection_status.Failure | None) -> str:
    if failure is None:
        return "-"
    on = f"notification {failure.notification_id}, " if failure.notification_id else ""
    return f"{on}{failure.failures}x since {failure.since:%Y-%m-%d %H:%M:%S%z}: {failure.error}"


@app.command(name="rebuild")
def rebuild(
    name: Annotated[str | None, Parameter(help="One projection; default all.")] = None,
    *,
    processes: Annotated[
        int | None,
        Parameter(
            help="Processes to rebuild in, each rebuilding a group of the projections in a pass of its "
            "own; default one per projection rebuilt, up to one per two CPU cores."
        ),
    ] = None,
) -> int:
    """Rebuild read models from the first event, with a progress bar: one pass over the event log reads
    each page once and hands it to every projection (see `projections.rebuild`); with several processes,
    each makes that pass for its group of projections. The projections must not be running elsewhere: stop
    `serve` (or start it with --no-projections) and `projections run` first; one that runs elsewhere is left
    as it is."""
    try:
        specs = [by_name(name)] if name else list(PROJECTIONS)
    except KeyError as error:
        console.print(f"[red]{error.args[0]}[/red]")
        return 2
    if processes is not None and processes < 1:
        console.print("[red]--processes: give 1 or more[/red]")
        return 2
    count = min(processes, len(specs)) if processes else rebuild_processes(len(specs))
    url = event_store_url(Environment.read())
    log_app = _log_app(url)
    try:
        head = log_app.head()
        if count == 1:
            return _report(specs, *_rebuild_here(url, log_app, specs, head))
    finally:
        log_app.close()
    return _report(specs, *_rebuild_apart(url, specs, count, head))


def _rebuild_here(
    url: str, log_app: LedgerLog, specs: list[ProjectionSpec], head: int
) -> tuple[list[Rebuilt], list[ProjectionSpec]]:
    with rebuilding(url, specs) as (lanes, busy), _progress_bar() as bar:
        tasks = {lane.spec.name: bar.add_task(lane.spec.name, total=head) for lane in lanes}
        replay_all(log_app, lanes, progress=lambda lane, events: bar.advance(tasks[lane], events))
        return [Rebuilt.of(lane) for lane in lanes], busy


def _rebuild_apart(
    url: str, specs: list[ProjectionSpec], processes: int, head: int
) -> tuple[list[Rebuilt], list[ProjectionSpec]]:
    with _progress_bar() as bar:
        tasks: dict[str, TaskID] = {}

        def starting(name: str) -> None:
            tasks[name] = bar.add_task(name, total=head)

        return rebuild_apart(
            url,
            specs,
            processes,
            starting=starting,
            progress=lambda name, events: bar.advance(tasks[name], events),
        )


@contextmanager
def _progress_bar() -> Iterator[Progress]:
    columns = (TextColumn("{task.description:<15}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn())
    with Progress(*columns, console=console) as bar:
        yield bar


def _report(specs: list[ProjectionSpec], rebuilt: list[Rebuilt], busy: list[ProjectionSpec]) -> int:
    code = 0
    outcomes = {done.name: done for done in rebuilt}
    for spec in specs:
        done = outcomes.get(spec.name)
        if spec in busy or done is None:
            console.print(f"[red]{spec.name} is running in another process; stop it first[/red]")
            code = 2
        elif done.failure is not None:
            console.print(f"[red]{done.failure}[/red]", soft_wrap=True)
            code = max(code, 1)
        else:
            console.print(f"{spec.name}: rebuilt to position {done.position}")
    return code
