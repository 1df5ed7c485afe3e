"""`broker-ledger projections run | status | rebuild`."""

from __future__ import annotations

import logging
import signal
import threading
from typing import Annotated

from cyclopts import App, Parameter
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Table

from application.credentials import var_dir
from application.database import ensure_schema, eventsourcing_env, resolve_database_url
from application.log import EVENTS_SCHEMA, LedgerLog
from projections.catalog import PROJECTIONS, by_name
from projections.runner import APPLICATION, ProjectionWorker, exclusive, open_view, replay

app = App(name="projections", help="Run, inspect and rebuild the read models.")
console = Console()


def _database() -> str:
    url = resolve_database_url(var_dir())
    ensure_schema(url, EVENTS_SCHEMA)
    return url


def _log_app(url: str) -> LedgerLog:
    return LedgerLog(env=eventsourcing_env(url, EVENTS_SCHEMA))


@app.command(name="run")
def run() -> int:
    """Run every projection in the foreground until SIGTERM or Ctrl-C (one process in the cluster runs
    each projection at a time; start several for fail-over)."""
    logging.basicConfig(level="INFO", format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    url = _database()
    workers = [ProjectionWorker(url, spec) for spec in PROJECTIONS]
    stopped = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stopped.set())
    for worker in workers:
        worker.start()
    stopped.wait()
    for worker in workers:
        worker.stop()
    return 0


@app.command(name="status")
def status() -> int:
    """Each projection's position in the event log and how many events it lags behind."""
    url = _database()
    log_app = _log_app(url)
    head = log_app.recorder.max_notification_id() or 0
    table = Table("projection", "position", "head", "lag (events)", "running")
    for spec in PROJECTIONS:
        position = open_view(url, spec).position(APPLICATION)
        with exclusive(url, spec) as free:
            table.add_row(spec.name, str(position), str(head), str(head - position), "no" if free else "yes")
    console.print(table)
    log_app.close()
    return 0


@app.command(name="rebuild")
def rebuild(name: Annotated[str | None, Parameter(help="One projection; default all.")] = None) -> int:
    """Rebuild read models from the first event, with a progress bar. The projection must not be running
    elsewhere: stop `serve` (or start it with --no-projections) and `projections run` first."""
    try:
        specs = [by_name(name)] if name else list(PROJECTIONS)
    except KeyError as error:
        console.print(f"[red]{error.args[0]}[/red]")
        return 2
    url = _database()
    log_app = _log_app(url)
    head = log_app.recorder.max_notification_id() or 0
    for spec in specs:
        with exclusive(url, spec) as free:
            if not free:
                console.print(f"[red]{spec.name} is running in another process; stop it first[/red]")
                return 2
            view = open_view(url, spec)
            view.reset()
            with Progress(
                TextColumn(spec.name),
                BarColumn(),
                MofNCompleteColumn(),
                TimeRemainingColumn(),
                console=console,
            ) as bar:
                task = bar.add_task(spec.name, total=head)
                position = replay(log_app, spec, view, progress=lambda n, t=task: bar.advance(t, n))
            console.print(f"{spec.name}: rebuilt to position {position}")
    log_app.close()
    return 0
