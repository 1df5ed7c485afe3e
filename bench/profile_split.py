"""Where the API workers' Python goes during the buys: py-spy samples of the threads holding the GIL, split
into libraries, the standard library and our modules by mechanism (issue 41).

`Profiler` starts `py-spy record --gil --format raw` on each API worker for the run's seconds (beside wrk, in
`bench/load.py --profile`), and `split` reads the collapsed stacks it wrote. Each sample counts once, twice
over:
- by its leaf frame (self time): a library by its package under site-packages (psycopg, litestar, ...), the
  standard library by its module (threading, asyncio, ...), or ours;
- by the deepest of our modules on its stack, named by the mechanism it belongs to (`MECHANISMS`: the
  Idempotency-Key, group commit, read-ahead, observability, ...); a sample with none of ours on its stack
  is the server's and the event loop's own (uvicorn, asyncio, anyio).
The thread hand-offs are the samples whose leaf is in threading, concurrent.futures, anyio's thread calls
or asyncio's futures and queues: the cost of a use case run in a worker thread rather than on the loop.

py-spy (a pip package, in the test extras) attaches to a process by ptrace: as root, or with
kernel.yama.ptrace_scope 0.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import sysconfig
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

OURS = ("domain", "application", "interface", "projections")
# the mechanism of a module of ours, by the longest matching path prefix (module path, "/"-separated)
MECHANISMS = {
    "interface/idempotency": "Idempotency-Key",
    "application/store/group_commit": "group commit",
    "application/store/binary_arrays": "group commit",
    "application/store/read_ahead": "read-ahead",
    "application/store/loop_reads": "read-ahead",
    "application/store/on_loop": "use cases on the loop",
    "application/store/statement_batches": "statement batches",
    "application/store/aggregates": "read-ahead",
    "interface/http/observability": "observability",
    "interface/http/request_ids": "observability",
    "interface/http/rate_limits": "rate limits",
    "application/store/msgspec_mapper": "event mapper",
    "application/store/transcodings": "event mapper",
    "application/store/actors": "event mapper",
    "application/store/log": "event store",
    "application/store/request_writes": "request's writes",
    "interface/http/read_your_writes": "read-your-writes",
    "interface/http/request_writes": "request's writes",
    "interface/http/bodies": "body decoding",
    "interface/http/body_checks": "body decoding",
    "interface/http/auth": "authentication",
    "interface/http/security": "authentication",
    "application/limits": "limits",
    "domain/limits": "limits",
    "application/request_checks": "checks and pricing",
    "application/orders": "checks and pricing",
    "domain/pricing": "checks and pricing",
    "domain/money": "checks and pricing",
    "interface/shared/transaction_presenters": "presenting the answer",
    "domain/transaction_view": "presenting the answer",
    "domain": "the aggregates",
    "application": "use cases",
    "interface": "routes and the HTTP edge",
    "projections": "projections",
}
HAND_OFFS = ("threading", "concurrent/futures", "anyio", "asyncio/futures", "asyncio/queues", "queue")
FRAME = re.compile(r"^(?P<function>.*) \((?P<file>[^():]+)(?::\d+)?\)$")
SITE_PACKAGES = re.compile(r"/(?:site|dist)-packages/(?P<package>[^/]+)")


@dataclass
class Split:
    """Samples by leaf (libraries, standard library, ours) and by the deepest of our modules."""

    samples: int = 0
    libraries: Counter[str] = field(default_factory=Counter)
    standard_library: Counter[str] = field(default_factory=Counter)
    ours_by_leaf: int = 0
    mechanisms: Counter[str] = field(default_factory=Counter)
    hand_offs: int = 0

    def share(self, count: int) -> float:
        return 100.0 * count / self.samples if self.samples else 0.0


class Profiler:
    """py-spy recording each of `pids` for `seconds`, into `directory`."""

    def __init__(self, pids: Sequence[int], seconds: float, directory: Path, rate: int = 200) -> None:
        binary = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
        if not Path(binary).exists():
            raise RuntimeError("py-spy is not installed: .venv/bin/pip install py-spy (in the test extras)")
        self.outputs = [directory / f"profile-{pid}.txt" for pid in pids]
        options = ["--duration", str(int(seconds)), "--rate", str(rate), "--gil", "--nonblocking"]
        options += ["--full-filenames", "--format", "raw"]
        self.processes = [
            subprocess.Popen(
                [binary, "record", "--pid", str(pid), *options, "--output", str(output)],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
            )
            for pid, output in zip(pids, self.outputs, strict=True)
        ]

    def finish(self, timeout: float = 60) -> Split:
        problems = []
        for process in self.processes:
            _, error = process.communicate(timeout=timeout)
            if process.returncode != 0:
                problems.append(error.decode(errors="replace")[-500:])
        found = [output for output in self.outputs if output.exists()]
        if not found:
            raise RuntimeError(f"py-spy recorded nothing: {' | '.join(problems)}")
        return split(line for output in found for line in output.read_text().splitlines())


def split(lines: Iterable[str]) -> Split:
    """The split of py-spy's raw (collapsed) stacks: `frame;frame;... count` per line, root first."""
    done = Split()
    standard = sysconfig.get_paths()["stdlib"]
    for line in lines:
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        files = [_file_of(frame) for frame in stack.split(";")]
        done.samples += count
        _count_leaf(done, files[-1], standard, count)
        done.mechanisms[_deepest_mechanism(files)] += count
    return done


def _file_of(frame: str) -> str:
    matched = FRAME.match(frame.strip())
    return matched.group("file") if matched else frame


def _ours(path: str) -> str | None:
    """The module path of ours (`interface/http/bodies`), or None."""
    parts = Path(path).with_suffix("").parts
    for index in range(len(parts) - 1, -1, -1):
        if parts[index] in OURS and "site-packages" not in parts[:index]:
            return "/".join(parts[index:])
    return None


def _count_leaf(done: Split, path: str, standard: str, count: int) -> None:
    package = SITE_PACKAGES.search(path)
    if package is not None:
        done.libraries[package.group("package").removesuffix(".py")] += count
    elif path.startswith(standard) or path.startswith("<frozen"):
        module = path.removeprefix(standard).lstrip("/").removesuffix(".py")
        module = module.removeprefix("<frozen ").removesuffix(">")
        done.standard_library[module.split("/")[0]] += count
        if any(module.startswith(name) for name in HAND_OFFS):
            done.hand_offs += count
    elif _ours(path) is not None:
        done.ours_by_leaf += count
    else:
        done.libraries["(other)"] += count
    if package is not None and package.group("package") == "anyio":
        done.hand_offs += count


def _deepest_mechanism(files: list[str]) -> str:
    for path in reversed(files):
        module = _ours(path)
        if module is not None:
            return mechanism_of(module)
    return "outside our modules (server, event loop)"


def mechanism_of(module: str) -> str:
    best = max((prefix for prefix in MECHANISMS if module.startswith(prefix)), key=len, default=None)
    return MECHANISMS[best] if best is not None else module


def report(found: Split, top: int = 8) -> list[str]:
    """The split as lines of text, largest first."""
    lines = [f"profile of the API workers (py-spy --gil, {found.samples:,} samples holding the GIL)"]
    library = sum(found.libraries.values())
    standard = sum(found.standard_library.values())
    lines.append(
        f"self time: libraries {found.share(library):.1f} %, standard library {found.share(standard):.1f} %, "
        f"ours {found.share(found.ours_by_leaf):.1f} %; thread hand-offs {found.share(found.hand_offs):.1f} %"
    )
    for title, counts in (("libraries", found.libraries), ("standard library", found.standard_library)):
        parts = [f"{name} {found.share(count):.1f}" for name, count in counts.most_common(top)]
        lines.append(f"  {title}: " + ", ".join(parts))
    lines.append("by the deepest of our modules on the stack (% of samples):")
    lines += [f"  {found.share(count):5.1f}  {name}" for name, count in found.mechanisms.most_common()]
    return lines
