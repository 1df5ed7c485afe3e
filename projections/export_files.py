"""A period export written to a folder: one Parquet or CSV file per extract of `projections.exports`, and
`manifest.json`, which says what was asked and, per file, its rows, the sums of its amounts per asset and
its sha256, so that the receiver can check that it got every file whole and reconcile it.

Amounts are never floats. In Parquet an amount column is a decimal128 at the largest scale of the assets
it holds (the places the settings give each asset), so every value is exact; a value that would need more
places refuses the export rather than being rounded. In CSV every amount is written positionally at its
own asset's scale (`0.00100000` BTC, `12.50` EUR). Times are UTC timestamps with their zone (ISO 8601 with
`+00:00` in CSV), days are dates.
"""

from __future__ import annotations

import csv
import hashlib
import json
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any, Protocol

import psycopg
import pyarrow as pa
import pyarrow.parquet as pq

from domain.money import Asset
from projections.exports import EXTRACTS, Assets, Column, Extract, Kind, Period, count_rows, read_batches

FORMATS = ("parquet", "csv")
MANIFEST = "manifest.json"
DECIMAL_PRECISION = 38  # decimal128's widest: every amount the ledger keeps fits at 18 places
Progress = Callable[[str, int, int], None]  # (file, rows written so far, rows in all)


@dataclass
class Written:
    """One file of the export as the manifest describes it."""

    file: str
    rows: int = 0
    sums: dict[str, dict[str, Decimal]] = field(default_factory=lambda: defaultdict(dict))
    sha256: str = ""

    def add(self, extract: Extract, rows: Iterable[tuple[Any, ...]]) -> None:
        """Counts the rows and adds their amounts to the sums per asset and column."""
        index = {column.name: i for i, column in enumerate(extract.columns)}
        for row in rows:
            self.rows += 1
            for i, column in enumerate(extract.columns):
                if column.asset is None or row[i] is None:
                    continue
                per_asset = self.sums[row[index[column.asset]]]
                per_asset[column.name] = per_asset.get(column.name, Decimal(0)) + row[i]

    def entry(self, places: dict[str, int]) -> dict[str, Any]:
        """The manifest's entry: the sums written positionally at their asset's scale, as in CSV."""
        sums = {
            asset: {name: positional(total, places.get(asset)) for name, total in totals.items()}
            for asset, totals in sorted(self.sums.items())
        }
        return {"file": self.file, "rows": self.rows, "sums": sums, "sha256": self.sha256}


class Sink(Protocol):
    def write(self, rows: list[tuple[Any, ...]]) -> None: ...

    def close(self) -> None: ...


def arrow_type(column: Column, assets: Assets) -> pa.DataType:
    """A column's Parquet type: an amount a decimal at the widest scale of the assets it holds, never a
    float; a time a UTC timestamp."""
    if column.kind is Kind.AMOUNT:
        return pa.decimal128(DECIMAL_PRECISION, assets.scale(column.holds))
    return {
        Kind.TEXT: pa.string(),
        Kind.INTEGER: pa.int64(),
        Kind.TIME: pa.timestamp("us", tz="UTC"),
        Kind.DAY: pa.date32(),
    }[column.kind]


def arrow_schema(extract: Extract, assets: Assets) -> pa.Schema:
    return pa.schema([pa.field(column.name, arrow_type(column, assets)) for column in extract.columns])


class ParquetSink:
    """Rows appended to one Parquet file, a row group per batch."""

    def __init__(self, path: Path, extract: Extract, assets: Assets) -> None:
        self.schema = arrow_schema(extract, assets)
        self.writer = pq.ParquetWriter(path, self.schema)

    def write(self, rows: list[tuple[Any, ...]]) -> None:
        columns = list(zip(*rows, strict=True)) if rows else [()] * len(self.schema)
        arrays = [pa.array(values, type=f.type) for values, f in zip(columns, self.schema, strict=True)]
        self.writer.write_table(pa.Table.from_arrays(arrays, schema=self.schema))

    def close(self) -> None:
        self.writer.close()


class CsvSink:
    """Rows appended to one CSV file with a header, each amount at its own asset's scale."""

    def __init__(self, path: Path, extract: Extract, assets: Assets) -> None:
        self.stream = path.open("w", encoding="utf-8", newline="")
        self.writer = csv.writer(self.stream)
        self.writer.writerow([column.name for column in extract.columns])
        self.extract, self.places = extract, assets.places
        self.index = {column.name: i for i, column in enumerate(extract.columns)}

    def write(self, rows: list[tuple[Any, ...]]) -> None:
        self.writer.writerows([self.cells(row) for row in rows])

    def cells(self, row: tuple[Any, ...]) -> list[str]:
        cells = []
        for column, value in zip(self.extract.columns, row, strict=True):
            if isinstance(value, Decimal) and column.asset:
                cells.append(positional(value, self.places.get(row[self.index[column.asset]])))
            else:
                cells.append(text_of(value))
        return cells

    def close(self) -> None:
        self.stream.close()


def positional(amount: Decimal, places: int | None) -> str:
    """An amount without exponent, at its asset's scale unless it has more places (then as it is)."""
    written = Asset("", places).written(amount) if places is not None else amount
    return format(written, "f")


def text_of(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, datetime):
        return value.astimezone(UTC).isoformat()
    if isinstance(value, date):
        return value.isoformat()
    return str(value)


SINKS: dict[str, type[ParquetSink] | type[CsvSink]] = {"parquet": ParquetSink, "csv": CsvSink}


def write_extract(
    conn: psycopg.Connection,
    extract: Extract,
    period: Period,
    path: Path,
    assets: Assets,
    progress: Progress | None = None,
) -> Written:
    """One extract written to `path` in the format its suffix names, batch by batch."""
    total = count_rows(conn, extract, period) if progress else 0
    written = Written(path.name)
    sink = SINKS[path.suffix.removeprefix(".")](path, extract, assets)
    try:
        for batch in read_batches(conn, extract, period):
            sink.write(batch)
            written.add(extract, batch)
            if progress:
                progress(path.name, written.rows, total)
        if written.rows == 0:
            sink.write([])  # a Parquet file of no rows still has its schema
    finally:
        sink.close()
    written.sha256 = sha256_of(path)
    return written


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as stream:
        while chunk := stream.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def export_period(
    url: str,
    period: Period,
    out: Path,
    file_format: str,
    assets: Assets,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """Writes every extract of the period into `out` (which must exist) and the manifest; returns the
    manifest. All extracts are read in one read-only repeatable-read transaction: they agree."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
        conn.read_only = True
        conn.autocommit = False
        with conn.transaction():
            files = [
                write_extract(conn, extract, period, out / f"{extract.name}.{file_format}", assets, progress)
                for extract in EXTRACTS
            ]
    manifest = {
        "partner": period.partner,
        "from": period.start.isoformat(),
        "to": period.end.isoformat(),
        "format": file_format,
        "period": "(from, to]: events after from, up to and including to",
        "files": [written.entry(assets.places) for written in files],
    }
    (out / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    return manifest
