"""The backup tests' PostgreSQL: a `tests.resilience.cluster.PrivateCluster` (initdb + pg_ctl in a temp dir,
loopback, trust, an unprivileged user when root) on the system's PostgreSQL rather than the embedded
server's: Debian 12's pgBackRest (2.45) knows PostgreSQL up to 15 and refuses the embedded 18
("unexpected control version = 1800"), see docs/backup-and-restore.md. Its restored copies run in folders of
its own temp dir, as its user, and are stopped with it.
"""

from __future__ import annotations

import glob
import shutil
import subprocess
from pathlib import Path

import psycopg

from tests.resilience.cluster import ClusterUnavailable, PrivateCluster

NEWEST_FOR_PGBACKREST = 15  # Debian 12's pgbackrest 2.45: PostgreSQL 9.4 to 15
ARCHIVED_WITHIN_SECONDS = 30


def system_postgres_bin() -> Path:
    """The newest /usr/lib/postgresql/<major>/bin that pgBackRest 2.45 supports, else the newest there is
    (pgBackRest then says which version it refuses)."""
    found = sorted(
        (int(Path(path).parent.name), Path(path))
        for path in glob.glob("/usr/lib/postgresql/*/bin")
        if Path(path).parent.name.isdigit() and (Path(path) / "initdb").is_file()
    )
    if not found:
        raise ClusterUnavailable(
            "no system PostgreSQL in /usr/lib/postgresql/*/bin (Debian's postgresql package), which the "
            "backup tests need: the embedded server's version is newer than Debian's pgBackRest supports"
        )
    supported = [entry for entry in found if entry[0] <= NEWEST_FOR_PGBACKREST]
    return (supported or found)[-1][1]


class ArchivingCluster(PrivateCluster):
    """A private cluster of the system's PostgreSQL, whose WAL the tests archive with pgBackRest."""

    def __init__(self) -> None:
        super().__init__(max_connections=100)
        self.bin_dir = system_postgres_bin()
        self.copies: list[Path] = []

    def socket_dir(self) -> Path:
        return self.root

    def restart(self) -> None:
        self._tool("pg_ctl", "-D", str(self.data), "-l", str(self.log), "-w", "-m", "fast", "restart")

    def copy_folder(self, name: str) -> Path:
        """A folder for a restored copy's data directory: not made (the restore makes it), stopped with the
        cluster."""
        self.copies.append(self.root / name)
        return self.root / name

    def switch_and_archive(self, url: str) -> str:
        """Closes the current WAL segment and waits until it is archived; returns its name."""
        with psycopg.connect(url, autocommit=True) as connection:
            segment = connection.execute("SELECT pg_walfile_name(pg_switch_wal())").fetchone()[0]
            for _ in range(ARCHIVED_WITHIN_SECONDS * 10):
                archived, failed = connection.execute(
                    "SELECT coalesce(last_archived_wal, ''), last_failed_wal FROM pg_stat_archiver"
                ).fetchone()
                if archived >= segment:
                    return segment
                connection.execute("SELECT pg_sleep(0.1)")
        within = f"within {ARCHIVED_WITHIN_SECONDS} s (last failed: {failed})"
        raise AssertionError(f"WAL segment {segment} not archived {within}")

    def destroy(self) -> None:
        for copy in self.copies:
            if (copy / "postmaster.pid").exists():
                subprocess.run(
                    [str(self.bin_dir / "pg_ctl"), "-D", str(copy), "-m", "immediate", "-w", "stop"],
                    user=self.user,
                    capture_output=True,
                    check=False,
                )
        super().destroy()
        shutil.rmtree(self.root, ignore_errors=True)
