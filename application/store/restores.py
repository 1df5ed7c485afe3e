"""A point-in-time restore of the event store into a new PostgreSQL cluster, never over the one it came from.

The instants that can be restored (`RestorableWindow`):
- the first is the end of the oldest backup in the repository, rounded up to the next whole second:
  pgBackRest keeps a backup's end in whole seconds, and a recovery cannot stop before the backup it starts
  from is consistent (its end);
- the last is one microsecond (PostgreSQL's resolution) before the last transaction in the archived WAL
  (`archived_wal`): a recovery to an instant stops before the first transaction after it, so an instant
  with no archived transaction after it has nothing to stop at and PostgreSQL refuses to start.
An instant outside them is refused (`OutsideBackups`) with both named, before anything is written.

`restore` has pgBackRest restore the latest backup that ended before the instant into a new, empty data
directory (`restore --type=time --target-action=promote --archive-mode=off`: the copy replays the WAL up to
the instant, becomes a primary of its own, and never archives into the repository it came from), sets it to
listen on its own port on loopback only, starts it and waits until the recovery has ended.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg

from application.store.archived_wal import last_archived_transaction
from application.store.backups import BackupInfo, BackupProblem, BackupSet, Repository

ONE_SECOND = timedelta(seconds=1)
ONE_MICROSECOND = timedelta(microseconds=1)
READY = "ready"  # postmaster.pid's status line once the server takes writes: the recovery has ended
POLL_SECONDS = 0.1
LOG_NAME = "restore.log"
# a data directory restored from a Debian cluster has neither: its configuration lives in /etc/postgresql
MINIMAL_HBA = "local all all peer\nhost all all 127.0.0.1/32 scram-sha-256\n"


class RestoreRefused(Exception):
    """A restore that is not started, for a reason the operator can fix; the message says it."""


class OutsideBackups(RestoreRefused):
    """The instant asked for cannot be restored from the repository; the message names what can."""


def written(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


@dataclass(frozen=True)
class RestorableWindow:
    first: datetime
    last: datetime | None  # None: no transaction in the archived WAL after `first`
    first_backup: str
    last_segment: str | None  # the segment of the last archived transaction

    def describe(self) -> str:
        start = f"from {written(self.first)} (the end of backup {self.first_backup})"
        if self.last is None:
            return f"{start}: nothing, as the archived WAL holds no transaction after it"
        return (
            f"{start} to {written(self.last)} (just before the last transaction archived, in WAL segment "
            f"{self.last_segment})"
        )


def restorable_window(repository: Repository, info: BackupInfo, bin_dir: Path) -> RestorableWindow:
    if not info.backups:
        raise OutsideBackups(
            f"stanza {info.stanza} holds no backup yet: nothing can be restored; take one with "
            "`broker-ledger backup run --type full`"
        )
    first = info.backups[0].stopped + ONE_SECOND
    last = last_archived_transaction(repository, info, bin_dir)
    if last is None or last.at - ONE_MICROSECOND < first:
        return RestorableWindow(first, None, info.backups[0].label, None)
    return RestorableWindow(first, last.at - ONE_MICROSECOND, info.backups[0].label, last.segment)


def check_instant(window: RestorableWindow, to: datetime) -> None:
    """`OutsideBackups` for an instant before the first or after the last that can be restored."""
    if window.last is not None and window.first <= to <= window.last:
        return
    where = "before the first" if to < window.first else "after the last"
    raise OutsideBackups(
        f"cannot restore to {written(to)}: it is {where} instant the backups can restore; they can restore "
        f"{window.describe()}"
    )


def backup_for(info: BackupInfo, to: datetime) -> BackupSet:
    """The latest backup that ended before `to` (less WAL to replay than from an older one)."""
    return [backup for backup in info.backups if backup.stopped + ONE_SECOND <= to][-1]


@dataclass(frozen=True)
class NewCluster:
    """Where the restored copy goes: an empty (or missing) data directory and a free port."""

    pgdata: Path
    port: int
    socket_dir: Path | None = None  # None: the one the backed-up server's settings name
    user: str = "postgres"  # the role the figures are read as, over the socket


@dataclass(frozen=True)
class WalReplayed:
    """The WAL a restore replayed after its backup's start: the positions' distance (a segment switched
    early counts whole) and the segments read."""

    span: int
    segments: int


@dataclass(frozen=True)
class Restored:
    cluster: NewCluster
    backup: BackupSet
    seconds: float  # from the restore's start until the copy takes writes
    wal_replayed: WalReplayed | None  # None: the copy would not say
    log: Path


def restore(
    repository: Repository, info: BackupInfo, to: datetime, cluster: NewCluster, bin_dir: Path, timeout: float
) -> Restored:
    """Restores the instant `to` (already checked against the window) into `cluster` and starts it; the
    copy has `timeout` seconds to replay the WAL and come up once its files are back."""
    began = time.monotonic()
    backup = backup_for(info, to)
    owner = repository.run_as()
    _prepare(cluster.pgdata, owner)
    target = to.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S.%f+00")
    repository.run(
        "restore",
        "--type=time",
        f"--target={target}",
        "--target-action=promote",
        "--archive-mode=off",
        f"--set={backup.label}",
        f"--pg1-path={cluster.pgdata}",
    )
    _configure(cluster, owner)
    log, deadline = cluster.pgdata / LOG_NAME, time.monotonic() + timeout
    _start(owner, bin_dir, cluster.pgdata, log, deadline)
    _wait_until_ready(cluster.pgdata, log, deadline)
    seconds = time.monotonic() - began
    return Restored(cluster, backup, seconds, _wal_replayed(cluster, backup.lsn_start), log)


def _prepare(pgdata: Path, owner: str | None) -> None:
    if pgdata.exists() and any(pgdata.iterdir()):
        raise RestoreRefused(f"{pgdata} is not empty: a restore goes into a new, empty data directory")
    pgdata.mkdir(parents=True, exist_ok=True)
    pgdata.chmod(0o700)
    if owner is not None:
        shutil.chown(pgdata, user=owner)


def _configure(cluster: NewCluster, owner: str | None) -> None:
    """The copy's own port, on loopback only (it is checked before anyone writes to it), after the recovery
    settings pgBackRest wrote; the files a Debian cluster keeps in /etc, when the backup has none."""
    pgdata = cluster.pgdata
    settings = [f"port = {cluster.port}", "listen_addresses = '127.0.0.1'"]
    if cluster.socket_dir is not None:
        settings.append(f"unix_socket_directories = '{cluster.socket_dir}'")
    with (pgdata / "postgresql.auto.conf").open("a") as auto:
        auto.write("# a restored copy (broker-ledger restore)\n" + "\n".join(settings) + "\n")
    for name, text in (("postgresql.conf", ""), ("pg_hba.conf", MINIMAL_HBA), ("pg_ident.conf", "")):
        if not (pgdata / name).exists():
            (pgdata / name).write_text(text)
            if owner is not None:
                shutil.chown(pgdata / name, user=owner)


def _start(owner: str | None, bin_dir: Path, pgdata: Path, log: Path, deadline: float) -> None:
    """`pg_ctl start`, which waits until the copy takes connections (read-only ones while it recovers)."""
    seconds = str(max(int(deadline - time.monotonic()), 1))
    command = [str(bin_dir / "pg_ctl"), "-D", str(pgdata), "-l", str(log), "-w", "-t", seconds, "start"]
    try:
        done = subprocess.run(command, user=owner, capture_output=True, check=False)
    except FileNotFoundError:
        raise BackupProblem(f"no pg_ctl in {bin_dir}: give PostgreSQL's bin folder (--bin-dir)") from None
    if done.returncode != 0:
        raise BackupProblem(f"pg_ctl could not start the restored server:\n{_log_end(log)}")


def _wait_until_ready(pgdata: Path, log: Path, deadline: float) -> None:
    """Until postmaster.pid says the server takes writes; `BackupProblem` with the log's end if the server
    stops first (say, a recovery that found no transaction after the instant) or the deadline passes."""
    while time.monotonic() < deadline:
        lines = _pid_file(pgdata)
        if len(lines) >= 8 and lines[7].strip() == READY:
            return
        if not lines or not _alive(int(lines[0])):
            break
        time.sleep(POLL_SECONDS)
    raise BackupProblem(f"the restored server in {pgdata} did not come up:\n{_log_end(log)}")


def _log_end(log: Path) -> str:
    lines = log.read_text(errors="replace").splitlines()[-15:] if log.exists() else ["<no log>"]
    return f"the end of {log}:\n" + "\n".join(lines)


def _pid_file(pgdata: Path) -> list[str]:
    try:
        return (pgdata / "postmaster.pid").read_text().splitlines()
    except FileNotFoundError:
        return []


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _wal_replayed(cluster: NewCluster, lsn_start: str) -> WalReplayed | None:
    """The WAL from the backup's start to the last record replayed (the server keeps that position after its
    recovery), read over the copy's socket; None when the copy does not let us in."""
    lines = _pid_file(cluster.pgdata)
    host = lines[4].strip() if len(lines) > 4 and lines[4].strip() else "127.0.0.1"
    try:
        with psycopg.connect(host=host, port=cluster.port, user=cluster.user, dbname="postgres") as conn:
            row = conn.execute(
                "SELECT pg_last_wal_replay_lsn()::text, setting::bigint FROM pg_settings "
                "WHERE name = 'wal_segment_size'"
            ).fetchone()
    except psycopg.Error:
        return None
    if row is None or row[0] is None:
        return None
    start, end, segment = _position(lsn_start), _position(row[0]), int(row[1])
    return WalReplayed(end - start, end // segment - start // segment + 1)


def _position(lsn: str) -> int:
    high, low = lsn.split("/")
    return (int(high, 16) << 32) + int(low, 16)
