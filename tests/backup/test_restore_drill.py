"""The restore drill (issue 37): the ledger restored to an instant equals the ledger read "as of" it.

The history (tests/backup/conftest.py `drill`) is backed up with docs/backup-and-restore.md's own steps: a
full backup, two incremental ones, WAL archived throughout, three instants noted between them. Each instant
is restored into a scratch cluster by the page's `restore` step, and on each copy:
- the page's `verify-restored` step, `audit verify`, passes: every read model equals a rebuild of the
  restored log, the postings balance, the audit chain matches the log;
- the audit chain's head is the live chain's head at that instant;
- the reserves, the transaction list and each customer's limits (the app in-process on the copy, read
  without `asOf`) are the live service's answers `asOf` that instant.
A restore to an instant outside the backups is refused, naming the first and last instants they restore.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg
import pytest

from application.store.backups import Repository
from application.store.restores import restorable_window, written
from tests.backup.conftest import DATABASE_NAME, Drill
from tests.backup.history import HEAD, Instant, read_answers, role_client
from tests.backup.runbook import steps
from tests.in_process import app_client
from tests.processes import free_port

RESTORED = re.compile(r"from backup (\S+) in ([0-9.]+) s, WAL replayed ([^;]+);")
CLI = [sys.executable, "-c", "from interface.cli.main import main; main()"]
REFUSED = 2


def restore_step(drill: Drill, instant: Instant, name: str) -> tuple[str, int, float]:
    """Runs the page's restore step for `instant` into a new folder; its output, its port, the wall time."""
    port = free_port()
    began = time.monotonic()
    said = drill.runbook.run(
        "restore",
        RESTORE_TO=written(instant.at),
        RESTORE_PGDATA=str(drill.cluster.copy_folder(name)),
        RESTORE_PORT=str(port),
    )
    return said, port, time.monotonic() - began


def test_the_ledger_restored_to_each_instant_equals_the_live_ledger_as_of_it(
    drill: Drill, tmp_path: Path, report: object
) -> None:
    drill.runbook.run("check")
    first = drill.instants[0].live
    assert first is not None and 404 in {status for status, _ in first.limits.values()}, "a later customer"
    figures: dict[str, object] = {**{k: f"{v:.1f}s" for k, v in drill.seconds.items()}}
    for backup in Repository(drill.config).info().backups:
        figures[f"{backup.kind} {backup.label}"] = (
            f"db {backup.size / 1e6:.1f}MB, copied {backup.delta / 1e6:.1f}MB, "
            f"repo {backup.repository_delta / 1e6:.2f}MB"
        )
    for number, instant in enumerate(drill.instants, start=1):
        said, port, seconds = restore_step(drill, instant, f"copy-{number}")
        found = RESTORED.search(said)
        assert found, said
        figures[f"events at instant {number}"] = instant.head[0]
        figures[f"restore {number}"] = f"{seconds:.1f}s (from {found[1]}, {found[2]}s, WAL {found[3]})"
        url = f"postgresql://postgres@127.0.0.1:{port}/{DATABASE_NAME}"
        began = time.monotonic()
        verified = drill.runbook.run("verify-restored", RESTORE_PORT=str(port))
        figures[f"audit verify {number}"] = f"{time.monotonic() - began:.1f}s"
        assert "audit verify: all checks passed" in verified, verified
        check_chain_head(url, instant)
        check_answers(url, instant, tmp_path / f"copy-{number}")
    assert sorted(set(drill.runbook.ran)) == sorted(steps()), "every step of the page is run by the drill"
    report(**figures)


def check_chain_head(url: str, instant: Instant) -> None:
    with psycopg.connect(url, autocommit=True) as connection:
        head = connection.execute(HEAD).fetchone()
        last = connection.execute("SELECT max(notification_id) FROM ledger.ledger_events").fetchone()[0]
    assert tuple(head) == instant.head, f"the restored chain's head {head}, the live one's {instant.head}"
    assert last == instant.head[1], "the restored log ends with the live log's event at the instant"


def check_answers(url: str, instant: Instant, folder: Path) -> None:
    assert instant.live is not None
    customers = list(instant.live.limits)
    # the limits' windows are the UTC day and month of the read: past midnight the copy is read at the instant
    same_windows = datetime.now(UTC).date() == instant.at.astimezone(UTC).date()
    with app_client(url, folder / "var") as client:
        broker = role_client(client, "demo-broker")
        with broker:
            restored = read_answers(broker, customers, None if same_windows else instant.at)
    assert restored.reserves == instant.live.reserves
    assert restored.transactions == instant.live.transactions
    for code, (status, body) in instant.live.limits.items():
        assert restored.limits[code][0] == status, (code, restored.limits[code], status)
        assert restored.limits[code][1] == body, code


def test_an_instant_outside_the_backups_is_refused_naming_the_first_and_last(drill: Drill) -> None:
    repository = Repository(drill.config)
    info = repository.info()
    window = restorable_window(repository, info, drill.cluster.bin_dir)
    assert window.last is not None
    before = info.backups[0].started - timedelta(seconds=1)
    after_the_archive = window.last + timedelta(microseconds=1)
    for moment in (before, after_the_archive):
        target = drill.cluster.copy_folder(f"refused-{moment.timestamp()}")
        options = ["--pgdata", str(target), "--port", str(free_port())]
        options += ["--bin-dir", str(drill.cluster.bin_dir)]
        done = subprocess.run(
            [*CLI, "restore", "--config", str(drill.config), "--to", written(moment), *options],
            capture_output=True,
            text=True,
            check=False,
        )
        assert done.returncode == REFUSED, done.stderr
        assert written(window.first) in done.stderr and written(window.last) in done.stderr, done.stderr
        assert not target.exists(), "nothing is written for a refused restore"


def test_verify_finds_a_damaged_file_of_a_backup(drill: Drill) -> None:
    """`backup verify` reads every file back against its checksum: one byte changed in a copy of the
    repository exits 1 naming the damage (pgBackRest 2.45's own `verify` exits 0 and only reports it)."""
    repository, damaged = drill.cluster.root / "repository", drill.cluster.root / "repository-damaged"
    subprocess.run(["cp", "-a", str(repository), str(damaged)], check=True)  # owners kept
    config = drill.cluster.root / "pgbackrest-damaged.conf"
    config.write_text(drill.config.read_text().replace(str(repository), str(damaged)))
    shutil.copystat(drill.config, config)
    if drill.cluster.user is not None:
        shutil.chown(config, user=drill.cluster.user)
    victim = max((damaged / "backup").rglob("*.gz"), key=lambda path: path.stat().st_size)
    with victim.open("r+b") as stored:
        stored.seek(100)
        stored.write(b"damaged")
    done = subprocess.run(
        [*CLI, "backup", "verify", "--config", str(config)], capture_output=True, text=True, check=False
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert "checksum invalid: 1" in done.stderr, done.stderr


@pytest.mark.slow
def test_the_first_and_the_last_restorable_instants_restore(drill: Drill) -> None:
    """The window's ends are exact: a restore to each comes up (the last: the recovery stops before the last
    archived transaction, the only one after it)."""
    repository = Repository(drill.config)
    window = restorable_window(repository, repository.info(), drill.cluster.bin_dir)
    assert window.last is not None
    for name, moment in (("first", window.first), ("last", window.last)):
        said, _, _ = restore_step(drill, Instant(moment, (0, 0, "")), f"edge-{name}")
        assert RESTORED.search(said), said
