"""What can be restored, from pgBackRest's `info` and the archived WAL (no server: the rules alone):
the first instant is the oldest backup's end on the next whole second, the last the last archived
transaction's time; an instant outside is refused naming both; the backup restored is the latest that ended
before the instant."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from application.store.archived_wal import TRANSACTION_END, _before_lsn
from application.store.backups import VERIFIED_OK, Server, archive_settings, configuration, parse_info
from application.store.restores import (
    OutsideBackups,
    RestorableWindow,
    backup_for,
    check_instant,
    written,
)

FULL_STOP = 1796209472  # 2026-12-02T11:04:32Z
INFO = [
    {
        "name": "broker-ledger",
        "archive": [{"id": "15-1", "min": "000000010000000000000001", "max": "000000010000000000000009"}],
        "db": [{"id": 1, "version": "15"}],
        "backup": [
            {
                "label": label,
                "type": kind,
                "error": False,
                "timestamp": {"start": stop - 5, "stop": stop},
                "lsn": {"start": "0/2000028", "stop": "0/3000050"},
                "info": {"size": 22, "delta": 2, "repository": {"size": 3, "delta": 1}},
            }
            for label, kind, stop in (
                ("20261202-110427F", "full", FULL_STOP),
                ("20261202-110427F_20261202-110433I", "incr", FULL_STOP + 100),
            )
        ],
    }
]
STOPPED = datetime.fromtimestamp(FULL_STOP, UTC)
WINDOW = RestorableWindow(
    STOPPED + timedelta(seconds=1),
    STOPPED + timedelta(seconds=300),
    "20261202-110427F",
    "000000010000000000000009",
)


def test_info_is_read_into_backups_oldest_first_and_the_archives_range() -> None:
    info = parse_info(json.dumps(INFO), "broker-ledger")
    assert [backup.kind for backup in info.backups] == ["full", "incr"]
    assert info.backups[0].stopped == STOPPED
    assert (info.postgres_version, info.archive_id, info.wal_last) == (
        "15",
        "15-1",
        "000000010000000000000009",
    )


@pytest.mark.parametrize(
    "moment",
    [
        STOPPED,
        STOPPED + timedelta(seconds=1) - timedelta(microseconds=1),
        WINDOW.last + timedelta(microseconds=1),
    ],
)
def test_an_instant_outside_the_window_is_refused_naming_its_first_and_last(moment: datetime) -> None:
    with pytest.raises(OutsideBackups) as refused:
        check_instant(WINDOW, moment)
    assert written(WINDOW.first) in str(refused.value) and written(WINDOW.last) in str(refused.value)


def test_the_window_s_ends_are_restorable() -> None:
    check_instant(WINDOW, WINDOW.first)
    check_instant(WINDOW, WINDOW.last)


def test_nothing_is_restorable_when_the_archive_holds_no_transaction_after_the_first_backup() -> None:
    with pytest.raises(OutsideBackups, match="holds no transaction"):
        check_instant(RestorableWindow(WINDOW.first, None, WINDOW.first_backup, None), WINDOW.first)


def test_the_backup_restored_is_the_latest_that_ended_before_the_instant() -> None:
    info = parse_info(json.dumps(INFO), "broker-ledger")
    assert backup_for(info, STOPPED + timedelta(seconds=100)).kind == "full"
    assert backup_for(info, STOPPED + timedelta(seconds=101)).kind == "incr"


def test_a_transaction_s_time_is_read_from_pg_waldump_in_utc() -> None:
    line = "rmgr: Transaction len (rec/tot): 34/34, tx: 726, desc: COMMIT 2026-12-02 11:04:32.727018 UTC"
    assert TRANSACTION_END.findall(line) == ["2026-12-02 11:04:32.727018"]
    assert TRANSACTION_END.findall("desc: ABORT 2026-12-02 11:04:32 UTC") == ["2026-12-02 11:04:32"]


def test_segments_before_the_oldest_backup_are_not_read() -> None:
    assert _before_lsn("000000010000000000000001", "0/2000028")
    assert not _before_lsn("000000010000000000000002", "0/2000028")
    assert not _before_lsn("000000010000000100000000", "0/2000028")


def test_the_configuration_archives_into_its_stanza_and_keeps_two_full_backups(
    tmp_path, pgbackrest_installed: None
) -> None:
    text = configuration(tmp_path / "repo", Server(tmp_path / "data", 5433), "broker-ledger")
    assert "repo1-retention-full=2" in text and f"pg1-path={tmp_path / 'data'}" in text
    settings = archive_settings(tmp_path / "pgbackrest.conf", "broker-ledger")
    assert "archive_mode = on" in settings
    assert f"--config={tmp_path / 'pgbackrest.conf'} --stanza=broker-ledger archive-push %p'" in settings
    assert VERIFIED_OK == "status: ok"
