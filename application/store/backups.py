"""Backups of the event store's PostgreSQL server with pgBackRest (docs/backup-and-restore.md).

Why pgBackRest and not only `pg_dump`: a dump is one instant, taken slowly; a ledger must be restorable to
the instant before a mistake (a dropped table, a wrong operator command), which takes base backups plus every
WAL segment between them. pgBackRest archives the WAL as PostgreSQL writes it (`archive_command`), takes
full, differential and incremental backups with a checksum of every file, expires what the retention no
longer needs, verifies the repository (`verify`) and restores to an instant. Debian ships it (`pgbackrest`).

`Repository` is one stanza of one pgBackRest configuration file: it runs `pgbackrest` with that file, as the
owner of that file when run as root (pgBackRest must run as the same system user as PostgreSQL, whose files
it reads and writes), and reads what the repository holds from `pgbackrest info --output=json`.
`configuration` is the file `broker-ledger backup configure` writes and `archive_settings` the server's
settings that archive into it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

DEFAULT_STANZA = "broker-ledger"
BACKUP_KINDS = ("full", "diff", "incr")
RETENTION_FULL = 2  # full backups kept (each with the differentials, incrementals and WAL that need it)
ARCHIVE_TIMEOUT_SECONDS = 60  # a segment is archived at least this often while anything is written
VERIFIED_OK = "status: ok"  # the stanza's line in `pgbackrest verify --output=text` when every file is whole
UNSAFE_IN_PATHS = set(" \t\n'\"\\")  # the paths go into archive_command, a quoted PostgreSQL setting


class BackupProblem(Exception):
    """pgBackRest could not do what was asked; the message says what and quotes pgBackRest."""


@dataclass(frozen=True)
class BackupSet:
    """One backup in the repository, as `pgbackrest info` describes it."""

    label: str
    kind: str  # full, diff or incr
    started: datetime
    stopped: datetime  # pgBackRest keeps whole seconds
    size: int  # the database's size
    delta: int  # what this backup copied
    repository_size: int  # in the repository, compressed, with what it refers to
    repository_delta: int  # in the repository, compressed, this backup alone
    lsn_start: str
    lsn_stop: str


@dataclass(frozen=True)
class BackupInfo:
    """What one stanza's repository holds: its backups, oldest first, and the archived WAL's range."""

    stanza: str
    postgres_version: str  # the major version, e.g. "15"
    archive_id: str  # e.g. "15-1": the folder of the archived WAL
    wal_first: str | None
    wal_last: str | None
    backups: tuple[BackupSet, ...]


def parse_info(text: str, stanza: str) -> BackupInfo:
    """The stanza's part of `pgbackrest info --output=json`."""
    found = [entry for entry in json.loads(text) if entry.get("name") == stanza]
    if not found:
        raise BackupProblem(f"pgbackrest info names no stanza {stanza!r}")
    entry = found[0]
    if not entry.get("db"):  # pgBackRest's status then says why: "missing stanza path", ...
        said = entry.get("status", {}).get("message", "no database in the stanza")
        raise BackupProblem(f"stanza {stanza}: {said}; create it with `broker-ledger backup init`")
    archives = entry.get("archive") or [{}]
    databases = entry["db"]
    return BackupInfo(
        stanza=stanza,
        postgres_version=str(databases[-1].get("version", "")),
        archive_id=str(archives[-1].get("id", "")),
        wal_first=archives[-1].get("min"),
        wal_last=archives[-1].get("max"),
        backups=tuple(_backup_set(backup) for backup in entry.get("backup", []) if not backup.get("error")),
    )


def _backup_set(backup: dict[str, Any]) -> BackupSet:
    info, repository = backup["info"], backup["info"]["repository"]
    return BackupSet(
        label=backup["label"],
        kind=backup["type"],
        started=datetime.fromtimestamp(backup["timestamp"]["start"], UTC),
        stopped=datetime.fromtimestamp(backup["timestamp"]["stop"], UTC),
        size=info["size"],
        delta=info["delta"],
        repository_size=repository["size"],
        repository_delta=repository["delta"],
        lsn_start=backup["lsn"]["start"],
        lsn_stop=backup["lsn"]["stop"],
    )


@dataclass(frozen=True)
class Repository:
    """One stanza of a pgBackRest configuration file, and the commands run against it."""

    config: Path
    stanza: str = DEFAULT_STANZA

    def run_as(self) -> str | None:
        """The system user pgBackRest runs as: the configuration file's owner when we are root (PostgreSQL's
        user, as `configure` leaves it), else ourselves."""
        if os.geteuid() != 0:
            return None
        owner = self.config.owner()
        return None if owner == "root" else owner

    def run(self, *args: str) -> str:
        """`pgbackrest --config=... --stanza=... ARGS`; its standard output, or `BackupProblem` with what it
        said when it fails."""
        return self.read(*args).decode(errors="replace")

    def read(self, *args: str) -> bytes:
        """A command's standard output as bytes (`repo-get`: a file of the repository as stored)."""
        if not self.config.is_file():
            raise BackupProblem(
                f"no pgBackRest configuration at {self.config}: run `broker-ledger backup configure`"
            )
        command = [pgbackrest(), f"--config={self.config}", f"--stanza={self.stanza}", *args]
        done = subprocess.run(command, user=self.run_as(), capture_output=True, check=False)
        if done.returncode != 0:
            said = (done.stderr or done.stdout).decode(errors="replace").strip()[-2000:]
            raise BackupProblem(f"pgbackrest {' '.join(args)} failed (exit {done.returncode}):\n{said}")
        return done.stdout

    def info(self) -> BackupInfo:
        return parse_info(self.run("info", "--output=json"), self.stanza)

    def create(self) -> None:
        """Creates the stanza in the repository, then checks that the server's WAL reaches it."""
        self.run("stanza-create")
        self.run("check")

    def back_up(self, kind: str) -> BackupSet:
        """Takes a backup of `kind` (an incremental or differential one without a full one before it is taken
        full), expires what the retention no longer keeps, and returns the new backup."""
        if kind not in BACKUP_KINDS:
            raise BackupProblem(f"--type {kind!r}: one of {', '.join(BACKUP_KINDS)}")
        before = {backup.label for backup in self.info().backups}
        self.run("backup", f"--type={kind}")
        made = [backup for backup in self.info().backups if backup.label not in before]
        if not made:
            raise BackupProblem("pgbackrest backup ended without a new backup in the repository")
        return made[-1]

    def verify(self) -> str:
        """`pgbackrest verify`: every file of every backup and every archived segment read back and checked
        against its checksum; what it found per backup and archive, or `BackupProblem` with it when anything
        is missing or damaged. (pgBackRest 2.45 exits 0 either way: its report's status line tells.)"""
        said = self.run("verify", "--output=text", "--verbose")
        if VERIFIED_OK not in said.splitlines():
            raise BackupProblem(f"pgbackrest verify found missing or damaged files:\n{said.strip()}")
        return said


def pgbackrest() -> str:
    found = shutil.which("pgbackrest") or (
        "/usr/bin/pgbackrest" if Path("/usr/bin/pgbackrest").exists() else None
    )
    if found is None:
        raise BackupProblem(
            "pgbackrest is not installed: scripts/backup-tools installs Debian's package "
            "(as root: apt-get install -y --no-install-recommends pgbackrest)"
        )
    return found


def unsafe_path(path: Path) -> bool:
    """Whether a path cannot be written into `archive_command` as it is (spaces, quotes, backslashes)."""
    return bool(UNSAFE_IN_PATHS & set(str(path)))


@dataclass(frozen=True)
class Server:
    """The PostgreSQL server pgBackRest backs up: its data directory and how pgBackRest connects to it."""

    pgdata: Path
    port: int = 5432
    socket_dir: Path | None = None  # None: libpq's default
    user: str = (
        "postgres"  # the database role pgBackRest connects as (a superuser, or pg_read_all_settings...)
    )


def configuration(repo: Path, server: Server, stanza: str, retention_full: int = RETENTION_FULL) -> str:
    """The pgBackRest configuration file: one repository on a local path, one stanza, its logs, locks and
    spool in the repository's folder (never /var or /tmp, which may belong to another user)."""
    lines = [
        "[global]",
        f"repo1-path={repo}",
        f"repo1-retention-full={retention_full}",
        "repo1-retention-full-type=count",
        "compress-type=gz",
        "start-fast=y",  # a backup starts at once, with an immediate checkpoint
        "process-max=2",
        f"log-path={repo / 'log'}",
        "log-level-console=warn",
        "log-level-file=info",
        f"lock-path={repo / 'lock'}",
        f"spool-path={repo / 'spool'}",
        "",
        f"[{stanza}]",
        f"pg1-path={server.pgdata}",
        f"pg1-port={server.port}",
        f"pg1-user={server.user}",
    ]
    if server.socket_dir is not None:
        lines.append(f"pg1-socket-path={server.socket_dir}")
    return "\n".join(lines) + "\n"


def archive_settings(config: Path, stanza: str, timeout: int = ARCHIVE_TIMEOUT_SECONDS) -> str:
    """The lines for postgresql.conf that archive every WAL segment into the stanza (a restart applies
    `archive_mode`)."""
    command = f"{pgbackrest()} --config={config} --stanza={stanza} archive-push %p"
    return (
        f"# WAL archived into pgBackRest's stanza {stanza} (broker-ledger backup configure)\n"
        "wal_level = replica\n"
        "archive_mode = on\n"
        f"archive_command = '{command}'\n"
        f"archive_timeout = {timeout}\n"
    )


def write_configuration(config: Path, repo: Path, text: str, owner: str | None) -> None:
    """Writes the file and makes the repository's folders, all owned by `owner` (PostgreSQL's system user)
    when given; the file is readable by that user only, as it names the repository."""
    for folder in (repo, repo / "log", repo / "lock", repo / "spool", config.parent):
        folder.mkdir(parents=True, exist_ok=True)
    for folder in (repo, repo / "log", repo / "lock", repo / "spool"):
        folder.chmod(0o750)
        if owner is not None:
            shutil.chown(folder, user=owner)
    config.write_text(text)
    config.chmod(0o640)
    if owner is not None:
        shutil.chown(config, user=owner)
