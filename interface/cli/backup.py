"""`broker-ledger backup configure | init | run | info | verify` and `broker-ledger restore`.

The event store's server backed up with pgBackRest (`application.store.backups`) and restored to an instant
into a new cluster (`application.store.restores`); docs/backup-and-restore.md is the runbook, and
tests/backup runs its commands. Every command takes the pgBackRest configuration file that `configure`
writes (`--config`) and the stanza in it (`--stanza`, default broker-ledger); run as root, pgBackRest runs
as that file's owner, PostgreSQL's system user. Exit 0 on success, 1 when pgBackRest or PostgreSQL failed
(stderr quotes them), 2 for what the user can fix: a malformed instant, one outside the backups (stderr names
the first and last that can be restored), a data directory that is not empty.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Annotated

from cyclopts import App, Parameter

from application.store.backups import (
    ARCHIVE_TIMEOUT_SECONDS,
    BACKUP_KINDS,
    DEFAULT_STANZA,
    RETENTION_FULL,
    BackupInfo,
    BackupProblem,
    BackupSet,
    Repository,
    Server,
    archive_settings,
    configuration,
    unsafe_path,
    write_configuration,
)
from application.store.restores import (
    NewCluster,
    OutsideBackups,
    RestoreRefused,
    check_instant,
    restorable_window,
    restore,
    written,
)
from interface.cli.main import fail
from interface.shared.instants import Unreadable, instant

FAILED = 1
RESTORE_SECONDS = 600

app = App(
    name="backup",
    help="Back up the event store's PostgreSQL with pgBackRest: configure, take and verify backups, and say "
    "which instants can be restored (docs/backup-and-restore.md).",
)

ConfigOption = Annotated[
    Path, Parameter(name="--config", help="pgBackRest's configuration file, as `backup configure` wrote it.")
]
StanzaOption = Annotated[str, Parameter(name="--stanza", help="The stanza: the backed-up server's name.")]
BinDirOption = Annotated[
    Path | None,
    Parameter(
        name="--bin-dir",
        help="PostgreSQL's bin folder (pg_waldump, pg_ctl) of the backed-up version; default "
        "/usr/lib/postgresql/VERSION/bin.",
    ),
]


def pgbackrest_failed(problem: BackupProblem) -> int:
    print(str(problem), file=sys.stderr)
    return FAILED


@app.command(name="configure")
def configure(
    *,
    pgdata: Path,
    repo: Path,
    config: ConfigOption,
    port: int = 5432,
    socket_dir: Path | None = None,
    db_user: str = "postgres",
    stanza: StanzaOption = DEFAULT_STANZA,
    retention_full: int = RETENTION_FULL,
    archive_timeout: int = ARCHIVE_TIMEOUT_SECONDS,
) -> int:
    """Write pgBackRest's configuration for the server of PGDATA, make the repository's folder, and print the
    settings that archive the server's WAL into it: append them to postgresql.conf, then restart PostgreSQL.

    Parameters
    ----------
    pgdata
        The server's data directory.
    repo
        The repository's folder: on another disk than PGDATA (better: another machine's, mounted).
    port
        The server's port.
    socket_dir
        The folder of the server's Unix socket; default libpq's.
    db_user
        The database role pgBackRest connects as (a superuser).
    retention_full
        Full backups kept, each with the backups and the WAL that need it.
    archive_timeout
        Seconds after which a WAL segment is archived even when not full: the most a lost server loses.
    """
    paths = [path.absolute() for path in (pgdata, repo, config)]
    unsafe = [str(path) for path in paths if unsafe_path(path)]
    if unsafe:
        return fail(f"backup configure: {', '.join(unsafe)}: a path without spaces, quotes or backslashes")
    if not (paths[0] / "PG_VERSION").is_file():
        return fail(f"backup configure: {paths[0]} is not a PostgreSQL data directory (no PG_VERSION)")
    server = Server(paths[0], port, socket_dir.absolute() if socket_dir else None, db_user)
    try:
        text = configuration(paths[1], server, stanza, retention_full)
        settings = archive_settings(paths[2], stanza, archive_timeout)
    except BackupProblem as problem:
        return pgbackrest_failed(problem)
    owner = paths[0].owner() if os.geteuid() == 0 and paths[0].owner() != "root" else None
    write_configuration(paths[2], paths[1], text, owner)
    print(f"wrote {paths[2]} (stanza {stanza}, repository {paths[1]})", file=sys.stderr)
    print(settings, end="")
    return 0


@app.command(name="init")
def init(*, config: ConfigOption, stanza: StanzaOption = DEFAULT_STANZA) -> int:
    """Create the stanza in the repository and check that the server's WAL is archived into it (the server
    must run with the settings `configure` printed)."""
    try:
        Repository(config.absolute(), stanza).create()
    except BackupProblem as problem:
        return pgbackrest_failed(problem)
    print(f"stanza {stanza} created; a WAL segment of the server was archived into it")
    return 0


@app.command(name="run")
def run_backup(
    *,
    config: ConfigOption,
    kind: Annotated[str, Parameter(name="--type")] = "incr",
    stanza: StanzaOption = DEFAULT_STANZA,
) -> int:
    """Take a backup (full, diff or incr; an incremental without a full one before it is taken full), then
    expire what the retention no longer keeps.

    Parameters
    ----------
    kind
        full: every file; diff: what changed since the last full; incr: since the last backup of any type.
    """
    if kind not in BACKUP_KINDS:
        return fail(f"backup run: --type {kind!r}: one of {', '.join(BACKUP_KINDS)}")
    began = time.monotonic()
    try:
        made = Repository(config.absolute(), stanza).back_up(kind)
    except BackupProblem as problem:
        return pgbackrest_failed(problem)
    print(f"{describe(made)}; took {time.monotonic() - began:.1f} s")
    return 0


@app.command(name="info")
def info(*, config: ConfigOption, stanza: StanzaOption = DEFAULT_STANZA, bin_dir: BinDirOption = None) -> int:
    """List the backups in the repository and the instants they can restore."""
    repository = Repository(config.absolute(), stanza)
    try:
        found = repository.info()
        print(
            f"stanza {stanza}: PostgreSQL {found.postgres_version}, WAL {found.wal_first}..{found.wal_last}"
        )
        for backup in found.backups:
            print(describe(backup))
        window = restorable_window(repository, found, postgres_bin(found, bin_dir))
    except BackupProblem as problem:
        return pgbackrest_failed(problem)
    except OutsideBackups as nothing:
        print(str(nothing))
        return 0
    print(f"restorable {window.describe()}")
    return 0


@app.command(name="verify")
def verify(*, config: ConfigOption, stanza: StanzaOption = DEFAULT_STANZA) -> int:
    """Read back every file of every backup and every archived WAL segment and check each against its
    checksum (`pgbackrest verify`). Exit 0 when all are whole, 1 otherwise."""
    began = time.monotonic()
    try:
        said = Repository(config.absolute(), stanza).verify()
    except BackupProblem as problem:
        return pgbackrest_failed(problem)
    print(said, end="")
    seconds = time.monotonic() - began
    print(f"backup verify: every backup and archived WAL segment matches its checksum ({seconds:.1f} s)")
    return 0


def restore_command(
    *,
    config: ConfigOption,
    to: str,
    pgdata: Path,
    port: int,
    stanza: StanzaOption = DEFAULT_STANZA,
    bin_dir: BinDirOption = None,
    socket_dir: Path | None = None,
    db_user: str = "postgres",
    timeout: float = RESTORE_SECONDS,
) -> int:
    """Restore the event store's server as it stood at an instant into a NEW cluster, and start it: never
    over the server it was backed up from. An instant before the end of the first backup, or with no
    transaction archived after it (the recovery stops at one), is refused, naming the first and last
    instants that can be restored.

    Parameters
    ----------
    to
        The instant, RFC 3339 with an offset (2026-03-10T12:00:00Z).
    pgdata
        The new cluster's data directory: missing or empty.
    port
        The new cluster's port (on 127.0.0.1 only).
    socket_dir
        The folder of the new cluster's Unix socket; default the backed-up server's.
    db_user
        The role the figures (WAL replayed) are read as, over the socket.
    timeout
        Seconds the restored server may take to replay the WAL and come up, once its files are back.
    """
    try:
        moment = instant("--to", to)
    except Unreadable as error:
        return fail(f"restore: {error}")
    repository = Repository(config.absolute(), stanza)
    cluster = NewCluster(pgdata.absolute(), port, socket_dir, db_user)
    try:
        found = repository.info()
        binaries = postgres_bin(found, bin_dir)
        check_instant(restorable_window(repository, found, binaries), moment)
        done = restore(repository, found, moment, cluster, binaries, timeout)
    except RestoreRefused as refused:
        return fail(f"restore: {refused}")
    except BackupProblem as problem:
        return pgbackrest_failed(problem)
    wal = done.wal_replayed
    replayed = "unknown" if wal is None else f"{wal.segments} segment(s), {megabytes(wal.span)}"
    print(
        f"restored {written(moment)} into {cluster.pgdata} from backup {done.backup.label} in "
        f"{done.seconds:.1f} s, WAL replayed {replayed}; it listens on 127.0.0.1:{port} "
        f"(log {done.log}); stop it with: pg_ctl -D {cluster.pgdata} stop"
    )
    return 0


def describe(backup: BackupSet) -> str:
    return (
        f"{backup.label} {backup.kind}: {written(backup.started)} to {written(backup.stopped)}, database "
        f"{megabytes(backup.size)}, copied {megabytes(backup.delta)}, in the repository "
        f"{megabytes(backup.repository_delta)} ({megabytes(backup.repository_size)} with what it needs)"
    )


def megabytes(size: int) -> str:
    return f"{size / 1e6:.1f} MB"


def postgres_bin(info: BackupInfo, given: Path | None) -> Path:
    """The bin folder of the backed-up PostgreSQL version: `--bin-dir`, else Debian's."""
    found = given or Path(f"/usr/lib/postgresql/{info.postgres_version}/bin")
    if not (found / "pg_waldump").is_file():
        raise BackupProblem(
            f"no pg_waldump in {found}: give the bin folder of PostgreSQL {info.postgres_version} (--bin-dir)"
        )
    return found
