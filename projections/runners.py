"""The runners of `broker-ledger projections run --processes N`: N processes that share the projections.

Runner i of N is a process of its own running a `ProjectionWorker` with `live.Share(i, N)`: it prefers the
projections at catalog index k with k % N == i, and takes over the others' when it finds them free twice in
a row (`projections.live`). `Runners` starts them and supervises them: SIGTERM or SIGINT to the parent stops
them all (SIGTERM to each, SIGKILL to one still running STOP_SECONDS later), and one that dies is started
again after RESTART_SECONDS (meanwhile the others take its projections over, and hand them back once it is
alive again).

The runners are `multiprocessing` processes of the "spawn" context rather than subprocesses of the command
line: a runner is one function (`run_runner`) given the database URL the parent resolved (an embedded
server's too) and its number, with no command line of its own to parse; the parent sees a runner end through
its sentinel, and a runner sees the parent end through its parent's sentinel and stops (a runner outliving a
killed parent would hold its projections' locks). Spawned, not forked: a runner starts from a fresh
interpreter rather than a copy of the parent's threads and connections. A runner ignores SIGINT (Ctrl-C
reaches every process of the terminal's group): stopping is the parent's to decide.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import signal
import threading
import time
from collections.abc import Callable
from multiprocessing.connection import wait
from multiprocessing.process import BaseProcess

from projections.base.runner import PAGE
from projections.catalog import PROJECTIONS
from projections.checkpoints import Checkpointer
from projections.live import ProjectionWorker, Share

log = logging.getLogger("broker_ledger.projections")
RESTART_SECONDS = 1.0  # a runner that died is started again after this pause
STOP_SECONDS = 15.0  # a runner told to stop (SIGTERM) is killed if it still runs this much later
WATCH_SECONDS = 0.2  # how often the parent and the runners look at the others' ends and at a stop
CORES_PER_RUNNER = 4  # `--processes auto`: a runner per 4 cores (PostgreSQL and the API need the others)


def auto_runners() -> int:
    """`run --processes auto`: a runner per CORES_PER_RUNNER cores, at least one, at most one a projection."""
    return min(len(PROJECTIONS), max(1, (os.cpu_count() or 1) // CORES_PER_RUNNER))


class Runners:
    """The runner processes of `run --processes N` (see above), started, watched and stopped here."""

    def __init__(
        self,
        url: str,
        count: int,
        prepare: Callable[[], None] | None = None,
        page: int = PAGE,
        checkpointer: Checkpointer | None = None,
    ) -> None:
        self.url = url
        self.count = count
        self.prepare = prepare  # what a runner does first: logging, its collector (a module-level function)
        self.page = page  # events a runner reads at once (BROKER_LEDGER_PROJECTION_PAGE, from its starter)
        self.checkpointer = checkpointer  # signs the Merkle tree's checkpoints in the runner leading it
        self._context = multiprocessing.get_context("spawn")
        self._processes: dict[int, BaseProcess] = {}
        self._restart_at: dict[int, float] = {}  # runners that died, by index: when to start them again

    def supervise(self, stopped: threading.Event) -> None:
        """Starts every runner, starts again those that die, and stops them all once `stopped` is set."""
        for index in range(self.count):
            self._start(index)
        try:
            while not stopped.is_set():
                running = [p.sentinel for p in self._processes.values() if p.exitcode is None]
                wait(running, timeout=WATCH_SECONDS)
                self._restart_the_dead(time.monotonic())
        finally:
            self.stop()

    def _start(self, index: int) -> None:
        process = self._context.Process(
            target=run_runner,
            args=(self.url, index, self.count, self.prepare, self.page, self.checkpointer),
            name=f"projections runner {index}",
            daemon=True,  # ended with this process, should it end without stopping them
        )
        process.start()
        self._processes[index] = process
        log.info("%s started (pid %d)", Share(index, self.count), process.pid)

    def _restart_the_dead(self, now: float) -> None:
        for index, process in self._processes.items():
            if process.exitcode is not None and index not in self._restart_at:
                self._restart_at[index] = now + RESTART_SECONDS
                log.warning(
                    "%s (pid %d) ended with exit code %d; starting it again in %.0f s",
                    Share(index, self.count),
                    process.pid,
                    process.exitcode,
                    RESTART_SECONDS,
                )
        for index, at in list(self._restart_at.items()):
            if at <= now:
                del self._restart_at[index]
                self._start(index)

    def stop(self) -> None:
        """SIGTERM to every runner; SIGKILL to one still running STOP_SECONDS later."""
        running = [p for p in self._processes.values() if p.exitcode is None]
        for process in running:
            process.terminate()
        deadline = time.monotonic() + STOP_SECONDS
        for process in running:
            process.join(max(deadline - time.monotonic(), 0))
            if process.exitcode is None:
                log.warning("%s did not stop within %.0f s; killing it", process.name, STOP_SECONDS)
                process.kill()
                process.join()


def run_runner(
    url: str,
    index: int,
    count: int,
    prepare: Callable[[], None] | None = None,
    page: int = PAGE,
    checkpointer: Checkpointer | None = None,
) -> None:
    """Runner `index` of `count`, in a process of its own (see above): its worker runs the projections of
    its share, `page` events at a time, and takes over others', until SIGTERM or the end of the parent
    process."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    stopped = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopped.set())
    if prepare is not None:
        prepare()
    share = Share(index, count)
    worker = ProjectionWorker(url, PROJECTIONS, share=share, page=page, checkpointer=checkpointer)
    worker.start()
    parent = multiprocessing.parent_process()
    while not stopped.is_set():
        if parent is not None and wait([parent.sentinel], timeout=WATCH_SECONDS):
            log.warning("%s: the process that started it has ended; stopping", share)
            break
    worker.stop()
