"""`broker-ledger projections run | status | rebuild`."""

from __future__ import annotations

import signal
import threading
from typing import Annotated

import psycopg
from cyclopts import App, Parameter
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Table

from application.logs import configure_logging
from application.store.database import eventsourcing_env
from application.store.log import EVENTS_SCHEMA, LedgerLog
from interface.cli import event_store_url
from interface.collector import settle_for_serving
from projections import status as projection_status
from projections.catalog import PROJECTIONS, by_name
from projections.lanes import Lane
from projections.live import ProjectionWorker, stop_all
from projections.rebuild import rebuilding, replay_all
from projections.runner import ProjectionSpec, exclusive

app = App(name="projections", help="Run, inspect and rebuild the read models.")
console = Console()


def _log_app(url: str) -> LedgerLog:
    return LedgerLog(env=eventsourcing_env(url, EVENTS_SCHEMA))


@app.command(name="run")
def run() -> int:
    """Run every projection in the foreground until SIGTERM or Ctrl-C (one process in the cluster runs
    each projection at a time; start several for fail-over)."""
    configure_logging("info")
    url = event_store_url()
    workers = [ProjectionWorker(url, PROJECTIONS)]
    settle_for_serving()
    stopped = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stopped.set())
    for worker in workers:
        worker.start()
    stopped.wait()
    stop_all(workers)
    return 0


@app.command(name="status")
def status() -> int:
    """Each projection's position in the event log, how far it lags behind (in events, and the age of the
    oldest event it has not applied), whether this cluster runs it, and its last error while it fails.
    Exit 1 when a projection is stalled (a recorded failure, or a lag older than
    BROKER_LEDGER_PROJECTION_STALL_SECONDS), else 0."""
    url = event_store_url()
    log_app = _log_app(url)
    try:
        head = log_app.recorder.max_notification_id() or 0
        threshold = projection_status.stall_seconds()
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
def rebuild(name: Annotated[str | None, Parameter(help="One projection; default all.")] = None) -> int:
    """Rebuild read models from the first event, with a progress bar: one pass over the event log reads
    each page once and hands it to every projection (see `projections.rebuild`). The projections must not
    be running elsewhere: stop `serve` (or start it with --no-projections) and `projections run` first; one
    that runs elsewhere is left as it is."""
    try:
        specs = [by_name(name)] if name else list(PROJECTIONS)
    except KeyError as error:
        console.print(f"[red]{error.args[0]}[/red]")
        return 2
    url = event_store_url()
    log_app = _log_app(url)
    try:
        head = log_app.recorder.max_notification_id() or 0
        with (
            rebuilding(url, specs) as (lanes, busy),
            Progress(
                TextColumn("{task.description:<15}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeRemainingColumn(),
                console=console,
            ) as bar,
        ):
            tasks = {lane.spec.name: bar.add_task(lane.spec.name, total=head) for lane in lanes}
            replay_all(log_app, lanes, progress=lambda lane, events: bar.advance(tasks[lane], events))
    finally:
        log_app.close()
    return _report(specs, lanes, busy)


def _report(specs: list[ProjectionSpec], lanes: list[Lane], busy: list[ProjectionSpec]) -> int:
    code = 0
    rebuilt = {lane.spec.name: lane for lane in lanes}
    for spec in specs:
        lane = rebuilt.get(spec.name)
        if spec in busy or lane is None:
            console.print(f"[red]{spec.name} is running in another process; stop it first[/red]")
            code = 2
        elif lane.failure is not None:
            console.print(f"[red]{lane.failure}[/red]", soft_wrap=True)
            code = max(code, 1)
        else:
            console.print(f"{spec.name}: rebuilt to position {lane.position}")
    return code
