"""Runners share the projections (`projections.live.Share`): runner i of N leads the projections at catalog
index k with k % N == i, even when another started a moment before it; it takes over another runner's only
once it has found them free on two looks in a row, and keeps what it took over when that runner comes back;
a worker without a share (an API worker's) takes every free projection at its first look, as it always has;
and `projections run --processes auto` starts a runner per eight cores."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import pytest

from projections import live
from projections import runners as runners_module
from projections.catalog import PROJECTIONS
from projections.live import ProjectionWorker, Share
from tests.projections.audit_support import lives
from tests.projections.runner_support import NAMES, all_at_head
from tests.projections.stall_support import eventually
from tests.projections.support import run_cli as run

RETRY_SECONDS = 0.5  # between two looks at the locks
FIRST, SECOND = frozenset(NAMES[0::2]), frozenset(NAMES[1::2])  # the shares of runners 0 and 1 of 2


@pytest.fixture
def runner(traded: str) -> Iterator[Callable[[int], ProjectionWorker]]:
    """Makes runner `index` of 2 on the traded database (started, and stopped at the end)."""
    made: list[ProjectionWorker] = []

    def make(index: int) -> ProjectionWorker:
        worker = ProjectionWorker(traded, PROJECTIONS, retry_seconds=RETRY_SECONDS, share=Share(index, 2))
        made.append(worker)
        worker.start()
        return worker

    yield make
    live.stop_all(made)


def test_two_runners_each_lead_their_own_share_though_one_starts_a_moment_later(traded, runner):
    first = runner(0)
    eventually(lambda: first.led == FIRST)
    time.sleep(RETRY_SECONDS / 5)  # the first has looked once, and found the second's share free
    second = runner(1)
    eventually(lambda: second.led == SECOND)
    time.sleep(3 * RETRY_SECONDS)  # looks enough to take what it could
    assert (first.led, second.led) == (FIRST, SECOND)
    lives(traded, "b")
    eventually(lambda: all_at_head(traded))


def test_a_runner_takes_over_a_stopped_ones_share_after_two_looks_and_hands_it_back_when_it_returns(
    traded, runner
):
    first, second = runner(0), runner(1)
    eventually(lambda: (first.led, second.led) == (FIRST, SECOND))
    time.sleep(2 * RETRY_SECONDS)  # the first has looked since and seen the second's share held
    second.stop()
    stopped = time.monotonic()
    eventually(lambda: first.led == FIRST | SECOND)
    waited = time.monotonic() - stopped
    assert RETRY_SECONDS * 0.9 <= waited <= 3 * RETRY_SECONDS + 1, waited  # free at two looks in a row
    lives(traded, "b")
    eventually(lambda: all_at_head(traded))

    again = runner(1)  # started again: its share is handed back to it
    eventually(lambda: (first.led, again.led) == (FIRST, SECOND))
    lives(traded, "c")
    eventually(lambda: all_at_head(traded))


def test_a_worker_without_a_share_takes_every_free_projection_at_its_first_look(traded, monkeypatch):
    looked_at_others = []
    monkeypatch.setattr(live, "held_locks", lambda connection: looked_at_others.append(1) or set())
    worker = ProjectionWorker(traded, PROJECTIONS, retry_seconds=RETRY_SECONDS)
    worker.start()
    try:
        assert worker.running.wait(15)
        assert worker.led == frozenset(NAMES)
        assert looked_at_others == []  # it prefers every projection: no query of the others' locks
    finally:
        worker.stop()


@pytest.mark.parametrize(
    ("cores", "runners"), [(None, 1), (2, 1), (4, 1), (8, 2), (12, 3), (16, 4), (64, len(PROJECTIONS))]
)
def test_auto_starts_a_runner_per_four_cores_and_at_most_one_per_projection(monkeypatch, cores, runners):
    monkeypatch.setattr(runners_module.os, "cpu_count", lambda: cores)
    assert runners_module.auto_runners() == runners == min(len(PROJECTIONS), max(1, (cores or 1) // 4))


def test_projections_run_refuses_fewer_than_one_process(capsys):
    assert run("projections", "run", "--processes", "0") == 2
    assert "--processes: give 1 or more, or auto" in capsys.readouterr().out
