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

from application.credentials import VAR_ENV, load_or_create_credentials
from application.logs import configure_logging, log_config
from application.settings import SETTINGS_ENV
from application.store.database import DATABASE_URL_ENV, redact, resolve_database_url
from interface.cli.main import USAGE_ERROR, SettingsOption, settings_or_none
from interface.environment import (
    CONSOLE_ORIGIN_ENV,
    MULTIPROCESS_ENV,
    PROJECTIONS_ENV,
    SUPERVISOR_ENV,
    Environment,
    hand_down,
)
from interface.http.server_limits import limited_protocol
from interface.shared.origins import origin_of

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
    environment = Environment.read()
    loaded = settings_or_none(settings or environment.settings_file)
    if loaded is None:
        return USAGE_ERROR
    var = environment.var_dir
    url = resolve_database_url(var, environment.database_url)
    hand_down(for_workers(environment, settings, url, no_projections))  # each reads them back as it starts
    if environment.console_origin is None:  # the console is opened where the server listens
        hand_down({CONSOLE_ORIGIN_ENV: listening_origin(host, port)})
    load_or_create_credentials(loaded, var, token_key=environment.token_key)  # makes var/ private (0700)
    if workers > 1:  # each worker counts into this directory; GET /metrics adds them up
        hand_down({MULTIPROCESS_ENV: str(fresh_metrics_dir(var))})
    log.info("database %s; client secrets of new clients in %s", redact(url), var / "client-secrets.txt")
    options = dict(
        factory=True,
        host=host,
        port=port,
        workers=workers,
        log_level=log_level,
        log_config=log_config(log_level),
        access_log=False,  # the app writes its own access log (interface/http/observability.py)
        timeout_graceful_shutdown=10,
        # request line and headers at most 32 KiB, and late requests answered 408
        # (interface/http/server_limits.py)
        http=limited_protocol(loaded.api.http.head_timeout_seconds, loaded.api.http.body_timeout_seconds),
    )
    if workers > 1:  # uvicorn's supervisor forwards SIGTERM to the workers and exits 0
        # and if it dies, they end too (interface/cli/worker.py)
        hand_down({SUPERVISOR_ENV: str(os.getpid())})
        uvicorn.run("interface.cli.worker:create_app", **options)
    else:
        QuietServer(uvicorn.Config("interface.cli.worker:create_lone_app", **options)).run()
    return 0


def for_workers(
    environment: Environment, settings: Path | None, url: str, no_projections: bool
) -> dict[str, str]:
    """What the workers are told through their environment: the settings file given (absolute), the var
    directory (absolute), the database (the embedded server's URL when DATABASE_URL is unset) and, with
    --no-projections, to run none."""
    told = {VAR_ENV: str(environment.var_dir.resolve()), DATABASE_URL_ENV: url}
    if settings is not None:
        told[SETTINGS_ENV] = str(Path(settings).resolve())
    if no_projections:
        told[PROJECTIONS_ENV] = "off"
    return told


def listening_origin(host: str, port: int) -> str:
    """The origin a browser on this machine opens the server at: http on its address, 127.0.0.1 when it
    listens on every interface."""
    everywhere = host.strip() in ("", "0.0.0.0", "::", "[::]")
    return origin_of("http", "127.0.0.1" if everywhere else host.strip("[]"), port)


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
