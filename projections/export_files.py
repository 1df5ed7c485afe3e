"""A period export written to a folder: one Parquet or CSV file per extract of `projections.exports`, and
`manifest.json`, which says what was asked and, per file, its rows, the sums of its amounts per asset
(amounts only: a price is no amount to add up) and its sha256, so that the receiver can check that it got
every file whole and reconcile it; and `manifest.sig`,
the Ed25519 signature of manifest.json's bytes by the service's audit key (`application.audit_key`), so that
the receiver can prove that the ledger wrote them (docs/verifying-the-log.md).

Amounts are never floats. In Parquet an amount column is a decimal128 at the largest scale of the assets
it holds (the places the settings give each asset), so every value is exact; a value that would need more
places refuses the export rather than being rounded; beside them, `currency_places` and `crypto_places` give
the scale of the row's own assets. In CSV every amount is written positionally at its
own asset's scale (`0.00100000` BTC, `12.50` EUR). Times are UTC timestamps with their zone (ISO 8601 with
`+00:00` in CSV), days are dates. A text cell of the CSV that a spreadsheet would take for a formula (it
begins with `=`, `+`, `-`, `@`, a tab or a carriage return) is written with a leading `'`, as OWASP advises;
the type of the column decides, so numbers (a negative amount) are never touched.

An export writes only its own files (`OutputFolder`): the folder is opened once, not through a link, and each
file is written under a temporary name created exclusively (`O_EXCL | O_NOFOLLOW`) in it, then renamed into
place; an output folder or an existing file of the export's names that is a symbolic link is refused
(`UnsafeOutput`), so nothing outside the folder changes. The manifest's checksums are those of the bytes
written.
"""

from __future__ import annotations

import csv
import errno
import hashlib
import io
import json
import os
import secrets
import stat
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any, BinaryIO, Protocol, TextIO

import psycopg
import pyarrow as pa
import pyarrow.parquet as pq

from application.audit_key import ALGORITHM, AuditKey
from domain.money import Asset
from projections.exports import EXTRACTS, Assets, Column, Extract, Kind, Period, count_rows, read_batches

FORMATS = ("parquet", "csv")
MANIFEST = "manifest.json"
SIGNATURE = "manifest.sig"  # the manifest's Ed25519 signature (docs/verifying-the-log.md)
DECIMAL_PRECISION = 38  # decimal128's widest: every amount the ledger keeps fits at 18 places
Progress = Callable[[str, int, int], None]  # (file, rows written so far, rows in all)
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")  # what makes a spreadsheet read a cell as a formula
NEW_FILE_MODE = 0o666  # the usual mode, less the umask, as open() gives


class UnsafeOutput(Exception):
    """An output folder, or a file in it, that is a symbolic link: refused, never written through."""


def refuse_link(path: Path) -> None:
    """Raises UnsafeOutput when `path` is a symbolic link (a missing path is fine)."""
    if path.is_symlink():
        raise UnsafeOutput(f"{path} is a symbolic link: refused (an export never writes through a link)")


def prepare_folder(path: Path) -> None:
    """The output folder, created with its missing parents; UnsafeOutput if it is a link."""
    refuse_link(path)
    path.mkdir(parents=True, exist_ok=True)


@dataclass
class Draft:
    """A file being written under its temporary name; its sha256 once it is complete."""

    stream: BinaryIO
    sha256: str = ""
    _text: io.TextIOWrapper | None = None

    def text(self) -> TextIO:
        """The draft as UTF-8 text, newlines written as given."""
        if self._text is None:
            self._text = io.TextIOWrapper(self.stream, encoding="utf-8", newline="")
        return self._text

    def finish(self) -> None:
        """Flushes what was written to disk and hashes the bytes of the file as they are."""
        if self._text is not None:
            self._text.flush()
            self._text.detach()
            self._text = None
        self.stream.flush()
        os.fsync(self.stream.fileno())
        self.stream.seek(0)
        digest = hashlib.sha256()
        while chunk := self.stream.read(1 << 20):
            digest.update(chunk)
        self.sha256 = digest.hexdigest()


class OutputFolder:
    """A folder that an export writes only its own files into. It is opened once, not through a link (every
    name below is resolved in the folder opened, whatever later happens to its path); each file is written
    under a temporary name created exclusively (`O_EXCL | O_NOFOLLOW`) and renamed into place, so a link
    or a hard link planted under a file's name is never written through."""

    def __init__(self, path: Path) -> None:
        refuse_link(path)
        self.path = path
        self.fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)

    def __enter__(self) -> OutputFolder:
        return self

    def __exit__(self, *_: object) -> None:
        os.close(self.fd)

    def existing(self, name: str) -> os.stat_result | None:
        """What is under `name` in the folder, not following a link: None if nothing, UnsafeOutput if a
        link."""
        try:
            found = os.stat(name, dir_fd=self.fd, follow_symlinks=False)
        except FileNotFoundError:
            return None
        if stat.S_ISLNK(found.st_mode):
            refuse_link(self.path / name)
        return found

    @contextmanager
    def replacing(self, name: str) -> Iterator[Draft]:
        """A draft of the file `name`, renamed into place once the block ends without an error, and removed
        if it raises; UnsafeOutput if a link is under that name, before or after the draft is written."""
        found = self.existing(name)
        if found is not None and stat.S_ISDIR(found.st_mode):
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(self.path / name))
        temporary = f".{name}.{secrets.token_hex(8)}.tmp"
        flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = os.open(temporary, flags, NEW_FILE_MODE, dir_fd=self.fd)
        try:
            with os.fdopen(fd, "w+b") as stream:
                draft = Draft(stream)
                yield draft
                draft.finish()
            self.existing(name)  # a link planted meanwhile is refused as well
            os.replace(temporary, name, src_dir_fd=self.fd, dst_dir_fd=self.fd)
        except BaseException:
            with suppress(OSError):
                os.unlink(temporary, dir_fd=self.fd)
            raise


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
                if column.kind is not Kind.AMOUNT or column.asset is None or row[i] is None:
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
    if column.kind in (Kind.AMOUNT, Kind.PRICE):
        return pa.decimal128(DECIMAL_PRECISION, assets.scale(column.holds))
    return {
        Kind.PLACES: pa.int32(),
        Kind.TEXT: pa.string(),
        Kind.INTEGER: pa.int64(),
        Kind.TIME: pa.timestamp("us", tz="UTC"),
        Kind.DAY: pa.date32(),
    }[column.kind]


def arrow_schema(extract: Extract, assets: Assets) -> pa.Schema:
    return pa.schema([pa.field(column.name, arrow_type(column, assets)) for column in extract.columns])


class ParquetSink:
    """Rows appended to one Parquet file, a row group per batch."""

    def __init__(self, draft: Draft, extract: Extract, assets: Assets) -> None:
        self.schema = arrow_schema(extract, assets)
        self.writer = pq.ParquetWriter(draft.stream, self.schema)

    def write(self, rows: list[tuple[Any, ...]]) -> None:
        columns = list(zip(*rows, strict=True)) if rows else [()] * len(self.schema)
        arrays = [pa.array(values, type=f.type) for values, f in zip(columns, self.schema, strict=True)]
        self.writer.write_table(pa.Table.from_arrays(arrays, schema=self.schema))

    def close(self) -> None:
        self.writer.close()


class CsvSink:
    """Rows appended to one CSV file with a header, each amount at its own asset's scale, each text cell
    that would be a formula made inert."""

    def __init__(self, draft: Draft, extract: Extract, assets: Assets) -> None:
        self.writer = csv.writer(draft.text())
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
            elif column.kind is Kind.TEXT:
                cells.append(inert(text_of(value)))
            else:
                cells.append(text_of(value))
        return cells

    def close(self) -> None:
        """Nothing to close: the draft is finished by its folder."""


def positional(amount: Decimal, places: int | None) -> str:
    """An amount without exponent, at its asset's scale unless it has more places (then as it is)."""
    written = Asset("", places).written(amount) if places is not None else amount
    return format(written, "f")


def inert(text: str) -> str:
    """A text cell a spreadsheet shows as text, never runs as a formula: one that begins with a formula's
    character gets a leading `'` (OWASP, "CSV Injection")."""
    return "'" + text if text.startswith(FORMULA_STARTS) else text


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
    folder: OutputFolder,
    name: str,
    assets: Assets,
    progress: Progress | None = None,
) -> Written:
    """One extract written to the folder's file `name` in the format its suffix names, batch by batch."""
    total = count_rows(conn, extract, period) if progress else 0
    written = Written(name)
    with folder.replacing(name) as draft:
        sink = SINKS[Path(name).suffix.removeprefix(".")](draft, extract, assets)
        try:
            for read in read_batches(conn, extract, period):
                batch = extract.with_places(read, assets.places)
                sink.write(batch)
                written.add(extract, batch)
                if progress:
                    progress(name, written.rows, total)
            if written.rows == 0:
                sink.write([])  # a Parquet file of no rows still has its schema
        finally:
            sink.close()
    written.sha256 = draft.sha256
    return written


def export_period(
    url: str,
    period: Period,
    out: Path,
    file_format: str,
    assets: Assets,
    progress: Progress | None = None,
    key: AuditKey | None = None,
) -> dict[str, Any]:
    """Writes every extract of the period into `out` (which must exist) and the manifest, signed by `key`
    in `manifest.sig` when given; returns the manifest. All extracts are read in one read-only
    repeatable-read transaction: they agree. UnsafeOutput, before anything is written, if `out` or a file
    of the export's names in it is a symbolic link."""
    names = [f"{extract.name}.{file_format}" for extract in EXTRACTS]
    with OutputFolder(out) as folder:
        for name in (*names, MANIFEST, SIGNATURE):
            folder.existing(name)
        with psycopg.connect(url, autocommit=True) as conn:
            conn.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
            conn.read_only = True
            conn.autocommit = False
            with conn.transaction():
                files = [
                    write_extract(conn, extract, period, folder, name, assets, progress)
                    for extract, name in zip(EXTRACTS, names, strict=True)
                ]
        manifest = manifest_of(period, file_format, files, assets)
        written = (json.dumps(manifest, indent=2) + "\n").encode()
        with folder.replacing(MANIFEST) as draft:
            draft.stream.write(written)
        if key is not None:
            with folder.replacing(SIGNATURE) as draft:
                draft.stream.write((json.dumps(signature_of(written, key), indent=2) + "\n").encode())
    return manifest


def signature_of(manifest: bytes, key: AuditKey) -> dict[str, str]:
    """`manifest.sig`: the Ed25519 signature of the bytes of `manifest.json` as written, and the key's id."""
    return {"file": MANIFEST, "algorithm": ALGORITHM, "keyId": key.key_id, "signature": key.sign(manifest)}


def manifest_of(period: Period, file_format: str, files: list[Written], assets: Assets) -> dict[str, Any]:
    """What was asked, and per file its rows, sums and sha256."""
    return {
        "partner": period.partner,
        "from": period.start.isoformat(),
        "to": period.end.isoformat(),
        "format": file_format,
        "period": "(from, to]: events after from, up to and including to",
        "files": [written.entry(assets.places) for written in files],
    }
