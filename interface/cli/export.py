"""`broker-ledger export`: one partner's period as files a spreadsheet, a notebook or DuckDB opens as they
are (Parquet or CSV), with a manifest to check and reconcile them (`projections.export_files`).

The period's bounds are read as every instant of the API and the command line is
(`interface.shared.instants`): RFC 3339 date-times with an offset, within the years 1 to 9999 in UTC; the
period is (from, to], as every period's, so its opening balances are the reserves as of --from and its
closing ones as of --to.

With read servers (BROKER_LEDGER_READ_DATABASE_URL) the export reads there, not on the primary: as on the
primary, it reads what the read models hold when it starts (a standby's replay is a moment behind), and it
waits for nothing.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Literal

from cyclopts import Parameter

from application.audit_key import load_or_create_audit_key
from interface.cli.main import USAGE_ERROR, database_url, fail, settings_or_none, unknown_partner
from interface.environment import Environment
from interface.shared.instants import Unreadable, instant
from projections.checkpoints import record_key
from projections.export_files import MANIFEST, Progress, UnsafeOutput, export_period, prepare_folder
from projections.exports import EXTRACTS, Assets, Period


def export(
    *,
    partner: str,
    from_: Annotated[str, Parameter(name="--from")],
    to: Annotated[str, Parameter(name="--to")],
    format: Literal["parquet", "csv"] = "parquet",
    out: Path,
    settings: Annotated[Path | None, Parameter(name="--settings")] = None,
) -> int:
    """Write a partner's transactions, status history, postings, reserve balances at both ends and daily
    volumes of the period (from, to] into --out, one file each, and manifest.json (the parameters, and per
    file its rows, its sums per asset and its sha256), signed in manifest.sig by the audit key in the var
    directory. Exit 2 for a malformed or empty period, an unknown
    partner, an output folder that cannot be written, or one that is a symbolic link or holds one under
    a file's name (nothing is written then).

    Parameters
    ----------
    partner
        The partner whose books are exported (only its rows are read).
    from_
        Start of the period (excluded): an RFC 3339 date-time with an offset, e.g. 2026-03-01T00:00:00Z.
    to
        End of the period (included), likewise; after --from.
    format
        parquet (amounts as decimals, times as UTC timestamps) or csv (the same columns, amounts written
        positionally at their asset's scale).
    out
        Folder to write into; created if missing. Files of the same names in it are replaced, each written
        under a temporary name and renamed into place; a folder, or a file of those names, that is a
        symbolic link is refused.
    settings
        Settings file, for the assets' places; default $BROKER_LEDGER_SETTINGS, else settings/demo.toml.
    """
    try:
        start, end = instant("--from", from_), instant("--to", to)
    except Unreadable as error:
        return fail(f"export: {error}")
    if start >= end:
        return fail(f"export: --from ({from_}) must be before --to ({to})")
    environment = Environment.read()
    loaded = settings_or_none(settings or environment.settings_file)
    if loaded is None:
        return USAGE_ERROR
    ledger = loaded.ledger
    if (unknown := unknown_partner(partner, ledger.partners)) is not None:
        return fail(f"export: {unknown}")
    assets = Assets(
        fiat={code: currency.minor_units for code, currency in ledger.currencies.items()},
        crypto={code: crypto.precision for code, crypto in ledger.cryptos.items()},
    )
    if (refusal := folder_refusal(out)) is not None:
        return fail(f"export: {refusal}")
    period = Period(partner, start, end)
    key = load_or_create_audit_key(environment.var_dir)
    record_key(database_url(environment), key)  # listed by GET /audit/public-key
    try:
        with progress_bar() as progress:
            manifest = export_period(read_url(environment), period, out, format, assets, progress, key)
    except UnsafeOutput as error:
        return fail(f"export: {error}")
    except OSError as error:
        return fail(f"export: cannot write into {out}: {error.strerror or error}")
    rows = sum(entry["rows"] for entry in manifest["files"])
    print(f"exported {rows} rows of {partner} in ({start}, {end}] to {out / MANIFEST}", file=sys.stderr)
    return 0


def read_url(environment: Environment) -> str:
    """Where an export reads: the read servers when set, else the service's database."""
    return environment.read_servers_url or database_url(environment)


def folder_refusal(out: Path) -> str | None:
    """Why the output folder cannot be written into (it is a link, or cannot be created), or None once it
    exists."""
    try:
        prepare_folder(out)
    except UnsafeOutput as error:
        return str(error)
    except OSError as error:
        return f"cannot create the folder {out}: {error.strerror or error}"
    return None


@contextmanager
def progress_bar() -> Iterator[Progress | None]:
    """A progress bar per file on stderr when it is a terminal; nothing otherwise (logs, pipes, tests)."""
    if not sys.stderr.isatty():
        yield None
        return
    from rich.progress import Progress as Bar  # only a terminal needs it

    with Bar(transient=False) as bar:
        tasks = {f"{extract.name}": bar.add_task(extract.name, total=None) for extract in EXTRACTS}

        def advance(file: str, done: int, total: int) -> None:
            bar.update(tasks[file.rsplit(".", 1)[0]], completed=done, total=total)

        yield advance
