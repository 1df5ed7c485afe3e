"""The last transaction in the archived WAL, whose time bounds the instants a restore can reach.

Why a transaction's time, and not the time the last segment was archived or the last backup ended: a
point-in-time recovery (`recovery_target_time`, inclusive) stops before the first commit or abort record
whose time is after the target; when the archived WAL holds none, PostgreSQL (13 and later) ends the
recovery with "recovery ended before configured recovery target was reached" and the restored server does
not start. So an instant can be restored only when a transaction after it is archived: the last restorable
instant is just before the last archived transaction (seen here: a restore to that transaction's own time
fails so). pgBackRest's `info` names the archived segments but no times, so the newest segments are read
here: fetched from the repository (`pgbackrest repo-ls`, `repo-get`, which need no data directory: the
server may be lost) and decoded by PostgreSQL's own `pg_waldump`, newest first, until one holds a
transaction.
"""

from __future__ import annotations

import bz2
import gzip
import json
import re
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from application.store.backups import BackupInfo, BackupProblem, Repository

SEGMENT_FILE = re.compile(r"(?P<segment>[0-9A-F]{24})-[0-9a-f]{40}(?P<suffix>\.gz|\.bz2)?")
LOG_FOLDER = re.compile(r"[0-9A-F]{16}")
# pg_waldump's description of a commit or an abort, its time written in UTC (TZ=UTC): "desc: COMMIT
# 2026-12-02 11:04:32.724810 UTC"; COMMIT_PREPARED and ABORT_PREPARED end a transaction too
TRANSACTION_END = re.compile(
    r"desc: (?:COMMIT|ABORT)(?:_PREPARED)? (\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d{1,6})?) UTC"
)
SEGMENTS_READ_AT_MOST = 64  # an archive whose last 64 segments hold no transaction: an idle server's


@dataclass(frozen=True)
class LastTransaction:
    at: datetime
    segment: str  # the archived segment that holds it


def last_archived_transaction(
    repository: Repository, info: BackupInfo, bin_dir: Path
) -> LastTransaction | None:
    """The newest commit or abort in the archived WAL, reading back from the newest segment to the oldest
    backup's (None when none of those segments holds one)."""
    oldest = info.backups[0].lsn_start if info.backups else None
    with tempfile.TemporaryDirectory(prefix="bl-wal-") as scratch:
        folder = Path(scratch)
        for read, (segment, path) in enumerate(_newest_segments(repository, info)):
            if read >= SEGMENTS_READ_AT_MOST or (oldest is not None and _before_lsn(segment, oldest)):
                return None
            found = _last_transaction_in(repository, bin_dir, folder, segment, path)
            if found is not None:
                return LastTransaction(found, segment)
    return None


def _newest_segments(repository: Repository, info: BackupInfo) -> Iterator[tuple[str, str]]:
    """(segment name, path in the repository) of every archived segment, newest first."""
    base = f"archive/{info.stanza}/{info.archive_id}"
    for folder in sorted(_listing(repository, base), reverse=True):
        if not LOG_FOLDER.fullmatch(folder):
            continue
        files = [SEGMENT_FILE.fullmatch(name) for name in _listing(repository, f"{base}/{folder}")]
        for match in sorted((m for m in files if m), key=lambda m: m["segment"], reverse=True):
            yield match["segment"], f"{base}/{folder}/{match.group(0)}"


def _listing(repository: Repository, path: str) -> list[str]:
    listed = json.loads(repository.run("repo-ls", "--output=json", path))
    return [name for name in listed if name != "."]


def _before_lsn(segment: str, lsn: str) -> bool:
    """Whether a segment (16 MiB ones, the default) ends before the WAL position `lsn` ("0/5000028")."""
    high, low = (int(part, 16) for part in lsn.split("/"))
    log, seg = int(segment[8:16], 16), int(segment[16:24], 16)
    return (log, seg) < (high, low >> 24)


def _last_transaction_in(
    repository: Repository, bin_dir: Path, folder: Path, segment: str, path: str
) -> datetime | None:
    stored = repository.read("repo-get", path)
    if path.endswith(".gz"):
        stored = gzip.decompress(stored)
    elif path.endswith(".bz2"):
        stored = bz2.decompress(stored)
    wal = folder / segment  # pg_waldump reads the segment's number from its file name
    wal.write_bytes(stored)
    try:
        dumped = subprocess.run(
            [str(bin_dir / "pg_waldump"), "--rmgr=Transaction", str(wal)],
            capture_output=True,
            env={"TZ": "UTC"},  # its times in UTC; it needs nothing else of the environment
            timeout=120,
            check=False,
        )
    except FileNotFoundError:
        raise BackupProblem(f"no pg_waldump in {bin_dir}: give PostgreSQL's bin folder (--bin-dir)") from None
    finally:
        wal.unlink(missing_ok=True)
    # pg_waldump exits 1 at the unused end of a segment closed early (a switch): what it printed stands
    times = TRANSACTION_END.findall(dumped.stdout.decode(errors="replace"))
    return datetime.fromisoformat(times[-1]).replace(tzinfo=UTC) if times else None
