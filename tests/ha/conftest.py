"""The high-availability fixtures: the packages (installed by scripts/ha-cluster, never skipped when missing),
one topology of a primary and two synchronous standbys under Patroni for the module (tests/ha/cluster.py),
stopped at its end with nothing left running (each test's figures: the root conftest's `report`).

The topology runs on its own loopback ports out of a temp folder; the machine's PostgreSQL and the suite's
server are not touched.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.ha.cluster import APT_INSTALL, Cluster, ClusterProblem, missing_packages

ROOT = Path(__file__).resolve().parents[2]
STARTED_WITHIN_SECONDS = 60


@pytest.fixture(scope="module")
def ha_cluster() -> Iterator[Cluster]:
    _install_packages()
    cluster = Cluster.create()
    try:
        try:
            cluster.start(timeout=STARTED_WITHIN_SECONDS)
        except ClusterProblem as problem:
            pytest.fail(f"the Patroni topology did not start: {problem}", pytrace=False)
        yield cluster
    finally:
        cluster.stop()
        left = cluster.processes()
        cluster.remove()
        assert not left, f"processes of the topology still running after stop: {left}"


def _install_packages() -> None:
    if not missing_packages():
        return
    done = subprocess.run(
        [str(ROOT / "scripts/ha-cluster"), "install"], capture_output=True, text=True, check=False
    )
    if missing_packages():
        pytest.fail(
            f"the failover tests need Debian's {', '.join(missing_packages())}; as root: {APT_INSTALL}\n"
            f"scripts/ha-cluster install said:\n{done.stderr[-2000:]}",
            pytrace=False,
        )
