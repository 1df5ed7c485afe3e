"""`broker-ledger export`: a partner's period as Parquet and CSV files with a manifest, read back with DuckDB
and pyarrow and reconciled with the read tables and the reserve positions (what GET /reserves answers)."""

from __future__ import annotations

import csv
import hashlib
import json
import re
import shlex
from decimal import Decimal
from pathlib import Path
from typing import Any

import duckdb
import psycopg
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from application.commands import AdjustmentRequest
from application.credentials import VAR_ENV
from application.ledger import Ledger
from application.store.database import DATABASE_URL_ENV
from application.use_cases import UseCases
from projections.exports import EXTRACTS
from projections.reserve_positions import read_positions
from tests.projections.scenario import populate, replay_what_exports_read
from tests.projections.support import run_cli as run

DOC = Path(__file__).resolve().parents[2] / "docs" / "analytics.md"
START, END = "2026-03-10T12:30:00Z", "2026-03-12T00:00:00Z"  # after the opening balance, to the end
PERIOD = {"start": START.replace("Z", "+00:00"), "end": END.replace("Z", "+00:00"), "partner": "demo"}


@pytest.fixture
def books(
    fresh_database: str,
    store_ledger: Ledger,
    store_use_cases: UseCases,
    clock: Any,
    addresses: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> str:
    """Two partners' scenario with an opening balance of demo's, read models and postings replayed; the CLI
    pointed at the database."""
    opening = AdjustmentRequest("OpeningBalance", "EUR", Decimal("1000.00"), "bank", "Exchange")
    store_use_cases.reserves.record_adjustment("demo", opening)
    clock.advance(hours=1)
    populate(store_use_cases, clock, addresses)
    replay_what_exports_read(store_ledger, fresh_database)
    monkeypatch.setenv(DATABASE_URL_ENV, fresh_database)
    monkeypatch.setenv(VAR_ENV, str(tmp_path / "var"))
    return fresh_database


def export(out: Path, file_format: str, partner: str = "demo") -> dict[str, Any]:
    argv = ("export", "--partner", partner, "--from", START, "--to", END, "--format", file_format)
    assert run(*argv, "--out", str(out)) == 0
    return json.loads((out / "manifest.json").read_text())


def scalar(url: str, query: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(url) as conn:
        return conn.execute(query, PERIOD).fetchall()


def test_parquet_files_are_exact_match_their_manifest_and_reconcile(books: str, tmp_path: Path) -> None:
    out = tmp_path / "parquet"
    manifest = export(out, "parquet")
    assert [entry["file"] for entry in manifest["files"]] == [f"{e.name}.parquet" for e in EXTRACTS]
    for entry in manifest["files"]:
        path = out / entry["file"]
        assert hashlib.sha256(path.read_bytes()).hexdigest() == entry["sha256"]
        assert duckdb.sql(f"SELECT count(*) FROM '{path}'").fetchall()[0][0] == entry["rows"]
        schema = pq.read_schema(path)
        assert not [f.name for f in schema if pa.types.is_floating(f.type)]
        assert all(f.type.tz == "UTC" for f in schema if pa.types.is_timestamp(f.type))
        table = pq.read_table(path)
        assert set(table.column("partner").to_pylist()) <= {"demo"}
        assert sums_of(table, entry) == {
            asset: {column: Decimal(total) for column, total in totals.items()}
            for asset, totals in entry["sums"].items()
        }
    assert manifest["files"][0]["rows"] > 0 and manifest["files"][2]["rows"] > 0
    reconcile_postings_and_balances(books, out)
    reconcile_transactions_and_volumes(books, out)


def sums_of(table: pa.Table, entry: dict[str, Any]) -> dict[str, dict[str, Decimal]]:
    """The manifest's sums recomputed from the file: per asset and amount column."""
    rows = table.to_pylist()
    found: dict[str, dict[str, Decimal]] = {}
    for asset, columns in entry["sums"].items():
        for column in columns:
            key = "crypto_code" if column in CRYPTO_COLUMNS else "currency_code"
            values = [row[column] for row in rows if row[key] == asset and row[column] is not None]
            found.setdefault(asset, {})[column] = sum(values, Decimal(0))
    return found


CRYPTO_COLUMNS = {c.name for e in EXTRACTS for c in e.columns if c.asset == "crypto_code"}


def reconcile_postings_and_balances(url: str, out: Path) -> None:
    by_currency = dict(
        scalar(
            url,
            "SELECT currency_code, sum(debit) FROM read.postings WHERE partner = %(partner)s "
            "AND at > %(start)s AND at <= %(end)s GROUP BY 1",
        )
    )
    exported = duckdb.sql(f"SELECT currency_code, sum(debit) FROM '{out}/postings.parquet' GROUP BY 1")
    assert dict(exported.fetchall()) == by_currency
    balances = duckdb.sql(
        f"SELECT reserve, currency_code, opening, debit, credit, closing FROM '{out}/balances.parquet'"
    ).fetchall()
    assert all(opening + debit - credit == closing for _, _, opening, debit, credit, closing in balances)
    assert ("bank", "EUR") in {(r, c) for r, c, opening, *_ in balances if opening > 0}
    with psycopg.connect(url) as conn:
        now = {(p.name, p.code): p.total for p in read_positions(conn, "demo") if p.total}
    assert {(r, c): closing for r, c, *_, closing in balances if closing} == now  # the period ends after all


def reconcile_transactions_and_volumes(url: str, out: Path) -> None:
    changed = scalar(
        url,
        "SELECT DISTINCT transaction_code FROM read.transaction_status_history WHERE partner = %(partner)s "
        "AND at > %(start)s AND at <= %(end)s",
    )
    codes = pq.read_table(out / "transactions.parquet").column("transaction_code").to_pylist()
    assert sorted(codes) == sorted(code for (code,) in changed)
    others = scalar(url, "SELECT transaction_code FROM read.transactions WHERE partner <> %(partner)s")
    assert not {code for (code,) in others} & set(codes)
    volumes = scalar(
        url,
        "SELECT currency_code, sum(count), sum(fiat_value) FROM read.daily_volumes "
        "WHERE partner = %(partner)s AND day = '2026-03-11' GROUP BY 1",
    )
    exported = duckdb.sql(
        f"SELECT currency_code, sum(count), sum(fiat_value) FROM '{out}/daily_volumes.parquet' GROUP BY 1"
    )
    assert exported.fetchall() == volumes


def test_csv_has_the_same_columns_and_amounts_at_each_assets_scale(books: str, tmp_path: Path) -> None:
    parquet = export(tmp_path / "p", "parquet")
    exported = export(tmp_path / "c", "csv")
    for in_parquet, in_csv in zip(parquet["files"], exported["files"], strict=True):
        assert (in_csv["rows"], in_csv["sums"]) == (in_parquet["rows"], in_parquet["sums"])
        path = tmp_path / "c" / in_csv["file"]
        assert hashlib.sha256(path.read_bytes()).hexdigest() == in_csv["sha256"]
        header = path.read_text().splitlines()[0].split(",")
        assert header == pq.read_schema(tmp_path / "p" / in_parquet["file"]).names
    with (tmp_path / "c" / "transactions.csv").open() as stream:
        rows = list(csv.DictReader(stream))
    btc = [row["crypto_amount"] for row in rows if row["crypto_code"] == "BTC"]
    assert btc and all(re.fullmatch(r"-?\d+\.\d{8}", amount) for amount in btc)
    assert all(re.fullmatch(r"-?\d+\.\d{2}", row["fiat_value"]) for row in rows)
    assert all(row["created"].endswith("+00:00") for row in rows)


def test_another_partners_export_holds_none_of_demos_rows(books: str, tmp_path: Path) -> None:
    manifest = export(tmp_path / "other", "parquet", partner="other")
    for entry in manifest["files"]:
        partners = pq.read_table(tmp_path / "other" / entry["file"]).column("partner").to_pylist()
        assert set(partners) <= {"other"}
    demo = scalar(books, "SELECT transaction_code FROM read.transactions WHERE partner = 'demo'")
    codes = pq.read_table(tmp_path / "other" / "postings.parquet").column("transaction_code").to_pylist()
    assert not {code for (code,) in demo} & set(codes)


@pytest.mark.parametrize(
    ("start", "end", "says"),
    [
        ("2026-03-10", END, "--from '2026-03-10' must be an RFC 3339"),
        (START, "2026-03-12T00:00:00", "--to '2026-03-12T00:00:00' must be"),
        (START, "2026-02-30T00:00:00Z", "--to '2026-02-30T00:00:00Z' must be"),
        (START, "9999-12-31T23:59:59-01:00", "--to '9999-12-31T23:59:59-01:00' must be"),  # year 10000 in UTC
        ("0001-01-01T00:00:00+01:00", END, "within the years 0001 to 9999 in UTC"),
        ("20260310T123000Z", END, "--from '20260310T123000Z' must be an RFC 3339"),
        (END, START, "must be before --to"),
        (START, START, "must be before --to"),
    ],
)
def test_a_malformed_or_empty_period_is_refused_with_exit_2(tmp_path, capsys, start, end, says) -> None:
    argv = ("export", "--partner", "demo", "--from", start, "--to", end, "--out", str(tmp_path / "x"))
    assert run(*argv) == 2
    assert says in capsys.readouterr().err
    assert not (tmp_path / "x").exists()


def test_an_unknown_partner_is_refused_with_exit_2(tmp_path, capsys) -> None:
    assert run("export", "--partner", "nobody", "--from", START, "--to", END, "--out", str(tmp_path)) == 2
    assert "unknown partner 'nobody'" in capsys.readouterr().err


def test_the_example_of_docs_analytics_runs(books: str, tmp_path: Path, monkeypatch) -> None:
    text = DOC.read_text()
    section = text[text.index("## Period exports") :]
    command = re.search(r"^```console\n\$ (broker-ledger export .*?)\n```", section, re.M | re.S)
    query = re.search(r"^```duckdb\n(.*?)^```", section, re.M | re.S)
    assert command and query
    monkeypatch.chdir(tmp_path)
    assert run(*shlex.split(command.group(1).replace("\\\n", " "))[1:]) == 0
    rows = duckdb.sql(query.group(1)).fetchall()
    assert rows and all(row[-1] is True for row in rows)


@pytest.mark.parametrize("file_format", ["parquet", "csv"])
def test_the_whole_calendar_is_a_period_like_any_other(books: str, tmp_path: Path, file_format: str) -> None:
    whole = ("--from", "0001-01-01T00:00:00Z", "--to", "9999-12-31T23:59:59.999999Z")
    argv = ("export", "--partner", "demo", *whole, "--format", file_format, "--out", str(tmp_path / "all"))
    assert run(*argv) == 0
    manifest = json.loads((tmp_path / "all" / "manifest.json").read_text())
    assert manifest["files"][0]["rows"] > 0


def test_parquet_carries_each_rows_scale_and_the_manifest_sums_amounts_only(
    books: str, tmp_path: Path
) -> None:
    manifest = export(tmp_path / "scales", "parquet")
    table = pq.read_table(tmp_path / "scales" / "transactions.parquet").to_pylist()
    places = {"BTC": 8, "ETH": 18, "LTC": 8, "EUR": 2, "USD": 2}
    assert table and all(row["crypto_places"] == places[row["crypto_code"]] for row in table)
    assert all(row["currency_places"] == places[row["currency_code"]] for row in table)
    btc = [row["crypto_amount"] for row in table if row["crypto_code"] == "BTC"]
    assert btc and all(round(amount, 8) == amount for amount in btc)
    postings = pq.read_table(tmp_path / "scales" / "postings.parquet").to_pylist()
    assert all(row["currency_places"] == places[row["currency_code"]] for row in postings)
    summed = {column for entry in manifest["files"] for totals in entry["sums"].values() for column in totals}
    assert "crypto_price" not in summed and "crypto_places" not in summed and "fiat_value" in summed
