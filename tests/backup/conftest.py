"""The backup fixtures: pgBackRest (installed by scripts/backup-tools; the tests fail, never skip, when it
cannot be), and for the module one drill's history: an archiving cluster of the system's PostgreSQL
(`cluster.ArchivingCluster`) set up by docs/backup-and-restore.md's own steps (`runbook.Runbook`), the service
in-process on it, a full backup and two incremental ones with trading before and between them, and an instant
noted after each; the live `asOf` answers at each instant are read once the history is over.
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.backup.cluster import ArchivingCluster
from tests.backup.history import Instant, LiveLedger
from tests.backup.runbook import Runbook
from tests.in_process import app_client
from tests.resilience.cluster import ClusterUnavailable

ROOT = Path(__file__).resolve().parents[2]
DATABASE_NAME = "ledger"
APT_INSTALL = "apt-get install -y --no-install-recommends pgbackrest"
BACKUP_SECONDS_APART = 1.1  # pgBackRest keeps a backup's end in whole seconds: an instant after it is 1 s on


@dataclass
class Drill:
    cluster: ArchivingCluster
    runbook: Runbook
    config: Path
    instants: list[Instant]
    seconds: dict[str, float]  # how long each part of the history took

    @property
    def database_url(self) -> str:
        return self.cluster.url(DATABASE_NAME)


def install_pgbackrest() -> None:
    if shutil.which("pgbackrest"):
        return
    done = subprocess.run(
        [str(ROOT / "scripts/backup-tools")], capture_output=True, text=True, check=False, timeout=600
    )
    if not shutil.which("pgbackrest"):
        pytest.fail(
            f"the backup tests need Debian's pgbackrest; as root: {APT_INSTALL}\n"
            f"scripts/backup-tools said:\n{done.stderr[-2000:]}",
            pytrace=False,
        )


@pytest.fixture(scope="module")
def pgbackrest_installed() -> None:
    """For a test that names pgBackRest's binary without a cluster: on a fresh machine, installed first."""
    install_pgbackrest()


@pytest.fixture(scope="module")
def archiving_cluster() -> Iterator[ArchivingCluster]:
    install_pgbackrest()
    try:
        cluster = ArchivingCluster()
    except ClusterUnavailable as problem:
        pytest.fail(f"cannot make the backup tests' PostgreSQL: {problem}", pytrace=False)
    try:
        cluster.init()
        yield cluster
    finally:
        cluster.destroy()


@pytest.fixture(scope="module")
def drill(archiving_cluster: ArchivingCluster, tmp_path_factory: pytest.TempPathFactory) -> Drill:
    """The history, backed up: configure, init, trade, full backup, then (trade, note, incremental backup)
    twice, then trade, note and trade once more, so that no instant is the history's end."""
    cluster = archiving_cluster
    config = cluster.root / "pgbackrest.conf"
    runbook = Runbook(
        {
            "PGDATA": str(cluster.data),
            "PGPORT": str(cluster.port),
            "PGHOST": str(cluster.socket_dir()),
            "BACKUP_REPO": str(cluster.root / "repository"),
            "BACKUP_CONFIG": str(config),
            "DATABASE_NAME": DATABASE_NAME,
            "BROKER_LEDGER_VAR": str(tmp_path_factory.mktemp("backup-cli") / "var"),
        }
    )
    began = time.monotonic()
    runbook.run("configure")
    cluster.start()
    runbook.run("init")
    cluster.create_database(DATABASE_NAME)
    seconds = {"set up": time.monotonic() - began}
    var = tmp_path_factory.mktemp("live") / "var"
    with app_client(cluster.url(DATABASE_NAME), var, projections=True) as client:
        ledger = LiveLedger(client, cluster.url(DATABASE_NAME))
        with contextlib.closing(ledger):
            instants = make_history(ledger, runbook, seconds)
            for instant in instants:
                instant.live = ledger.answers_as_of(instant)
    cluster.switch_and_archive(cluster.url(DATABASE_NAME))
    return Drill(cluster, runbook, config, instants, seconds)


def make_history(ledger: LiveLedger, runbook: Runbook, seconds: dict[str, float]) -> list[Instant]:
    instants = []
    ledger.fund()
    ledger.trade(0)
    began = time.monotonic()
    runbook.run("full-backup")
    seconds["full backup"] = time.monotonic() - began
    backed_up = time.monotonic()
    for round_number in (1, 2, 3):
        ledger.trade(round_number)
        time.sleep(max(0.0, backed_up + BACKUP_SECONDS_APART - time.monotonic()))
        instants.append(ledger.note())
        if round_number < 3:
            began = time.monotonic()
            runbook.run("incremental-backup")
            seconds[f"incremental backup {round_number}"] = time.monotonic() - began
            backed_up = time.monotonic()
    ledger.trade(4)
    return instants
