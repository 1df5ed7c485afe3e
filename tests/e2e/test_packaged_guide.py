"""The API document's examples ship with the package: the wheel carries docs/api.md as
interface/api_document/api.md, and the unpacked wheel, run outside the checkout, reads its examples from
there."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

from interface.api_document.examples import guide_examples
from tests.e2e.support import ROOT

GUIDE = ROOT / "docs" / "api.md"


def test_the_wheel_carries_the_api_guide_in_the_interface_package(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        assert archive.read("interface/api_document/api.md") == GUIDE.read_bytes()


def test_the_unpacked_wheel_reads_the_examples_of_its_own_guide_outside_the_checkout(
    wheel: Path, tmp_path: Path
) -> None:
    unpacked = tmp_path / "site"
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(unpacked)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    code = (
        "import interface.api_document.examples as e; "
        "print(e.GUIDE.exists(), len(e.guide_examples()), e.__file__)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=elsewhere,
        env={**os.environ, "PYTHONPATH": str(unpacked)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    exists, count, module = done.stdout.split()
    assert module.startswith(str(unpacked))
    assert (exists, int(count)) == ("False", len(guide_examples()))
