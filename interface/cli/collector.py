"""Python's cyclic garbage collector in the service's long-running processes: the API workers of `serve` and
`projections run` (a rebuild has its own setting, `projections.rebuild.fewer_collections`).

With Python's defaults, each collection of the oldest generation walks every object the process holds,
most of them loaded at start-up (modules, the app, its schemas) and never garbage; and the youngest
generation is collected every 700 allocations, which a request makes many times over. In
`bench/load.py` (2026-11-25) each API worker spent about 2 s in the collector over one benchmark, and each
full collection paused it for 95-160 ms: the p99.9 of a buy at 8 connections was 103-171 ms. With
`settle_for_serving` the collector took about 0.1-0.35 s per worker, its longest pause was 60 ms, and the
p99.9 at 8 connections was 56 ms (docs/performance.md).
"""

from __future__ import annotations

import gc

YOUNG_ALLOCATIONS = 10_000  # allocations (less deallocations) between collections of the youngest generation


def settle_for_serving() -> None:
    """Once the process is set up: what it holds is moved out of the collector's sight (`gc.freeze`), and
    the youngest generation is collected every YOUNG_ALLOCATIONS allocations rather than 700. Garbage
    cycles are still collected; what is frozen is never freed, so this runs once, in a process that serves
    until it ends (never in a test process that builds app after app)."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(YOUNG_ALLOCATIONS, *gc.get_threshold()[1:])
