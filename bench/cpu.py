"""Where the CPU goes during a run: CPU seconds of the API workers, a separate projections process,
PostgreSQL's processes and the whole machine, read from /proc (Linux) before and after.

Dividing by the buys created in the run gives CPU milliseconds per buy, the budget that decides the
throughput of a CPU-bound machine: with 2 cores, 2,500 buys/s leave 0.8 ms of CPU per buy for everything.
PostgreSQL's share counts every `postgres` process alive at both readings (its pooled backends live for
the whole run) that no other part lists; the machine's share counts all non-idle time, the load generator
included.

The benchmark's own instruments are a part of their own (`INSTRUMENTS`: the benchmark's process, whose
threads sample the projections' lag and the server's waits during a run, and those samplers' PostgreSQL
backends), and `SERVED` is the machine less them: what serving the load cost, wrk included. Polling every
5 and 10 ms, the samplers took about 0.3 CPU seconds a second on this 2-core machine (measured alone, on
2026-12-02), a sixth of it; under load they get less (0.3-0.5 ms per buy at 64 connections), and charged
to the buys they made a buy look that much dearer than it was, against a floor measured without them.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from pathlib import Path

TICKS = os.sysconf("SC_CLK_TCK")
MACHINE = "whole machine"
INSTRUMENTS = "benchmark's instruments"
SERVED = "machine less the instruments"


def process_seconds(pid: int) -> float:
    """User plus system CPU seconds of one process (all its threads), 0 if it is gone."""
    with contextlib.suppress(OSError, IndexError, ValueError):
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / TICKS
    return 0.0


def processes_named(name: str) -> list[int]:
    found = []
    for comm in Path("/proc").glob("[0-9]*/comm"):
        with contextlib.suppress(OSError):
            if comm.read_text().strip() == name:
                found.append(int(comm.parent.name))
    return found


def machine_seconds() -> float:
    """Non-idle CPU seconds of the whole machine since boot (user, nice, system, irq, softirq, steal)."""
    user, nice, system, _idle, _iowait, irq, softirq, steal = map(
        int, Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]
    )
    return (user + nice + system + irq + softirq + steal) / TICKS


class CpuMeter:
    """CPU seconds per part between `start()` and `stop()`; a part is a function listing its processes."""

    def __init__(self, parts: dict[str, Callable[[], list[int]]]) -> None:
        self.parts = {**parts, "PostgreSQL": lambda: self._postgres(parts)}
        self._before: dict[str, dict[int, float]] = {}
        self._machine = 0.0
        self.seconds: dict[str, float] = {}

    def start(self) -> CpuMeter:
        self._before = {part: self._read(pids()) for part, pids in self.parts.items()}
        self._machine = machine_seconds()
        return self

    def stop(self) -> dict[str, float]:
        for part, pids in self.parts.items():
            now, before = self._read(pids()), self._before[part]
            self.seconds[part] = sum(now[pid] - before[pid] for pid in now if pid in before)
        self.seconds[MACHINE] = machine_seconds() - self._machine
        if INSTRUMENTS in self.seconds:
            self.seconds[SERVED] = self.seconds[MACHINE] - self.seconds[INSTRUMENTS]
        return self.seconds

    @staticmethod
    def _postgres(parts: dict[str, Callable[[], list[int]]]) -> list[int]:
        """PostgreSQL's processes that no other part lists (the instruments' backends)."""
        listed = {pid for pids in parts.values() for pid in pids()}
        return [pid for pid in processes_named("postgres") if pid not in listed]

    @staticmethod
    def _read(pids: list[int]) -> dict[int, float]:
        return {pid: process_seconds(pid) for pid in pids}
