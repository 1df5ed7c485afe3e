"""`broker-ledger serve`: the HTTP API on uvicorn, on the embedded PostgreSQL unless DATABASE_URL is set."""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated

import uvicorn
from cyclopts import Parameter

from application.credentials import load_or_create_credentials, var_dir
from application.logs import configure_logging, log_config
from application.settings import SETTINGS_ENV
from application.store.database import redact, resolve_database_url
from interface.app import PROJECTIONS_ENV
from interface.cli import USAGE_ERROR, SettingsOption, settings_or_none
from interface.http_limits import limited_protocol
from interface.observability import MULTIPROCESS_ENV
from interface.worker import SUPERVISOR_ENV

log = logging.getLogger("broker_ledger")


def serve(
    *,
    host: str = "127.0.0.1",
    port: Annotated[int, Parameter(help="TCP port to listen on.")] = 8000,
    workers: Annotated[int, Parameter(help="Worker processes (each has its own pool).")] = 1,
    settings: SettingsOption = None,
    log_level: str = "info",
    no_projections: Annotated[
        bool,
        Parameter(
            name="--no-projections",
            negative="",
            help="Run no projections in the workers; leave them to `broker-ledger projections run`.",
        ),
    ] = False,
) -> int:
    """Serve the broker API over HTTP until SIGTERM or Ctrl-C. Each worker also offers to run every
    projection (one process in the cluster runs each at a time) unless --no-projections is given.

    Parameters
    ----------
    host
        Address to bind; 0.0.0.0 to listen on every interface.
    """
    configure_logging(log_level)
    loaded = settings_or_none(settings)
    if loaded is None:
        return USAGE_ERROR
    if no_projections:
        os.environ[PROJECTIONS_ENV] = "off"  # the workers inherit it
    if settings is not None:
        os.environ[SETTINGS_ENV] = str(Path(settings).resolve())
    var = var_dir()
    os.environ["BROKER_LEDGER_VAR"] = str(var.resolve())
    os.environ["DATABASE_URL"] = resolve_database_url(var)  # workers inherit the embedded server's URL
    load_or_create_credentials(loaded, var)  # creates var/ private (0700) if it is new
    if workers > 1:  # each worker counts into this directory; GET /metrics adds them up
        os.environ[MULTIPROCESS_ENV] = str(fresh_metrics_dir(var))
    log.info(
        "database %s; client secrets of new clients in %s",
        redact(os.environ["DATABASE_URL"]),
        var / "client-secrets.txt",
    )
    options = dict(
        factory=True,
        host=host,
        port=port,
        workers=workers,
        log_level=log_level,
        log_config=log_config(log_level),
        access_log=False,  # the app writes its own access log (interface/observability.py)
        timeout_graceful_shutdown=10,
        # request line and headers at most 32 KiB, and late requests answered 408 (interface/http_limits.py)
        http=limited_protocol(loaded.api.http.head_timeout_seconds, loaded.api.http.body_timeout_seconds),
    )
    if workers > 1:  # uvicorn's supervisor forwards SIGTERM to the workers and exits 0
        os.environ[SUPERVISOR_ENV] = str(os.getpid())  # and if it dies, they end too (interface/worker.py)
        uvicorn.run("interface.worker:create_app", **options)
    else:
        QuietServer(uvicorn.Config("interface.worker:create_lone_app", **options)).run()
    return 0


def fresh_metrics_dir(var: Path) -> Path:
    """Where the workers write their metrics for GET /metrics to add up; emptied, as counts start at zero."""
    directory = var / "metrics"
    shutil.rmtree(directory, ignore_errors=True)
    directory.mkdir(parents=True)
    return directory


class QuietServer(uvicorn.Server):
    """Stops gracefully on SIGTERM or SIGINT and then returns, so `serve` exits 0 after a clean
    shutdown (uvicorn's own server re-raises the signal, which ends the process with status 143)."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        previous = {sig: signal.signal(sig, self.handle_exit) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
