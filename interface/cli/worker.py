"""The app factories of `serve`'s processes: `create_app` for each worker of `serve --workers N` (a worker
ends when its supervisor does), `create_lone_app` for a lone `serve`. Both settle the garbage collector
once the app is built (`interface.cli.collector`).

uvicorn's supervisor forwards SIGTERM to its workers, but a supervisor that is killed (SIGKILL, the OOM
killer) forwards nothing: its workers would live on as orphans, still bound to the port and still holding
database connections and projection locks. So each worker, as it starts, asks Linux to send it SIGTERM when
its parent dies (`prctl(PR_SET_PDEATHSIG)`), and also watches its parent's pid (the supervisor's, which it
tells in `BROKER_LEDGER_SUPERVISOR_PID`) every `WATCH_SECONDS`, on every platform; either way it then shuts
down as on a SIGTERM. A worker reads its environment once, as it starts, and builds its app from it.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os
import signal
import sys
import threading

from litestar import Litestar

from interface.app import create_app as create_service_app
from interface.cli.collector import settle_for_serving
from interface.environment import Environment

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
WATCH_SECONDS = 1.0

log = logging.getLogger("broker_ledger")


def create_app() -> Litestar:
    """The service's app (`interface.app.create_app`), in a worker that ends with its supervisor."""
    environment = Environment.read()
    supervisor = environment.supervisor_pid
    end_with_supervisor(os.getppid() if supervisor is None else supervisor)
    return create_lone_app(environment)


def create_lone_app(environment: Environment | None = None) -> Litestar:
    """The service's app, from `environment` (read as the app is built when not given), in a process that
    serves it until it ends."""
    app = create_service_app(environment=environment)
    settle_for_serving()
    return app


def end_with_supervisor(supervisor: int) -> None:
    """Arranges that this process gets SIGTERM when its supervisor (the process of pid `supervisor`) is gone
    (at once if it already is)."""
    _ask_for_parent_death_signal()
    if os.getppid() != supervisor:  # it died before the request above: nobody will signal us
        _terminate(supervisor)
        return
    threading.Thread(target=_watch, args=(supervisor,), name="supervisor-watch", daemon=True).start()


def _ask_for_parent_death_signal() -> None:
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        if libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0) != 0:
            log.warning("prctl(PR_SET_PDEATHSIG) failed: errno %d", ctypes.get_errno())
    except OSError as error:
        log.warning("prctl(PR_SET_PDEATHSIG) is not available: %s", error)


def _watch(supervisor: int) -> None:
    """The fallback: polls the parent's pid, which becomes another (a reaper's) once the supervisor died."""
    stopped = threading.Event()
    while not stopped.wait(WATCH_SECONDS):
        if os.getppid() != supervisor:
            _terminate(supervisor)
            return


def _terminate(supervisor: int) -> None:
    log.warning("the supervisor (pid %d) is gone; this worker (pid %d) stops", supervisor, os.getpid())
    os.kill(os.getpid(), signal.SIGTERM)
