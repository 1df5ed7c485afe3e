"""The garbage collector of a serving process (`interface.cli.collector`): settled once the app is built."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from interface.cli import worker

ROOT = Path(__file__).resolve().parents[2]


def test_a_settled_process_freezes_what_it_holds_and_collects_young_objects_less_often():
    script = (
        "import gc\n"
        "from interface.cli.collector import YOUNG_ALLOCATIONS, settle_for_serving\n"
        "before = gc.get_threshold()\n"
        "settle_for_serving()\n"
        "print(gc.get_freeze_count() > 0, gc.get_threshold() == (YOUNG_ALLOCATIONS, *before[1:]))\n"
    )
    # in a process of its own: what is frozen is never freed, and the test process builds app after app
    ran = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, check=True)
    assert ran.stdout.split() == ["True", "True"]


def test_a_lone_serve_settles_the_collector_once_its_app_is_built(monkeypatch):
    steps: list[str] = []
    monkeypatch.setattr(worker, "create_service_app", lambda **_: steps.append("app built") or "the app")
    monkeypatch.setattr(worker, "settle_for_serving", lambda: steps.append("collector settled"))
    assert worker.create_lone_app() == "the app"
    assert steps == ["app built", "collector settled"]
