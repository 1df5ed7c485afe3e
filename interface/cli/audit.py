"""`broker-ledger audit verify | export | reconcile`."""

from __future__ import annotations

import contextlib
import os
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, TextIO

from cyclopts import App, Parameter

from interface.cli.main import event_store_url, fail
from interface.environment import Environment
from interface.http.problems import ApiProblem
from interface.reconciliation.routes import period_of
from projections.audit import Report, export, verify
from projections.audit_export import Exported
from projections.audit_verifications import record_verification
from projections.reconciliation import Reconciliation, reconcile_ledger

app = App(
    name="audit",
    help="Verify the ledger's integrity, export its history and reconcile a period for auditors.",
)


@app.command(name="verify")
def verify_command(
    *, expect: Annotated[list[str] | None, Parameter(name="--expect", negative=())] = None
) -> int:
    """Replay the whole event log and prove that (a) every read model equals a fresh rebuild, (b) postings
    balance, (c) the audit chain matches the log as stored. Exit 0 when every check passes, 1 otherwise.

    Parameters
    ----------
    expect
        NOTIFICATION_ID:CHAIN_HASH kept from an earlier run or export; the chain recomputed from the
        log must still reach it. Repeatable.
    """
    expected: list[tuple[int, str]] = []
    for item in expect or []:
        position, _, chain_hash = item.partition(":")
        if not position.isdigit() or len(chain_hash) != 64:
            return fail(f"--expect {item!r}: give NOTIFICATION_ID:CHAIN_HASH (64 hex digits)")
        expected.append((int(position), chain_hash.lower()))
    environment = Environment.read()
    url = event_store_url(environment)
    report = verify(url, expected=expected, stall_seconds=environment.stall_seconds)
    print_report(report)
    record_verification(url, datetime.now(UTC), report.checks)  # for the console's system page
    return 0 if report.ok else 1


def print_report(report: Report, out: TextIO | None = None) -> None:
    out = out or sys.stdout
    for check in report.checks:
        print(f"{check.status:<7} {check.name}", file=out)
        for detail in check.details:
            print(f"        {detail}", file=out)
    failed = sum(check.failed for check in report.checks)
    print("audit verify: " + (f"{failed} check(s) FAILED" if failed else "all checks passed"), file=out)


class ExportNotWritten(Exception):
    """The export's output could not be written; what was written of it is gone."""


def _export_to_file(url: str, start: datetime, end: datetime, path: Path) -> Exported:
    """Exports into `path`, creating the folders it lacks; on a failure to write, a regular file it began
    is removed (a device such as /dev/full is left alone)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise ExportNotWritten(f"cannot create the folder {path.parent}: {_reason(error)}") from None
    try:
        stream = path.open("w", encoding="utf-8")
    except OSError as error:
        raise ExportNotWritten(f"cannot write {path}: {_reason(error)}") from None
    try:
        with stream:
            return export(url, start, end, stream)
    except OSError as error:
        if path.is_file():
            path.unlink(missing_ok=True)
        raise ExportNotWritten(f"cannot write {path}: {_reason(error)}; nothing was kept") from None


def _export_to_stdout(url: str, start: datetime, end: datetime) -> Exported:
    try:
        done = export(url, start, end, sys.stdout)
        sys.stdout.flush()
    except OSError as error:
        _silence_stdout()
        raise ExportNotWritten(f"cannot write to standard output: {_reason(error)}") from None
    return done


def _silence_stdout() -> None:
    """Points standard output at /dev/null: what is still buffered for it goes nowhere, so the interpreter's
    own flush at exit does not fail again (and print a traceback of its own)."""
    with contextlib.suppress(OSError, ValueError):  # a stand-in without a file descriptor: nothing to do
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def _reason(error: OSError) -> str:
    if isinstance(error, FileExistsError | NotADirectoryError):
        return "a file is where a folder should be"
    return error.strerror or str(error)


def _utc(moment: datetime) -> datetime:
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment


@app.command(name="export")
def export_command(
    *,
    from_: Annotated[str, Parameter(name="--from")],
    to: Annotated[str, Parameter(name="--to")],
    out: Annotated[str, Parameter(name="--out")] = "-",
) -> int:
    """Write every event recorded in [--from, --to) as JSON Lines, with the chain hashes to re-verify them.

    Parameters
    ----------
    from_
        Start of the period, ISO 8601 (e.g. 2026-03-01 or 2026-03-01T00:00:00+01:00; UTC if no offset).
    to
        End of the period (excluded), ISO 8601.
    out
        File to write; "-" for standard output. Missing folders of its path are created (like mkdir -p);
        a file of that name is replaced. If it cannot be written (a file where a folder should be, no
        permission, a full disk), the command says why, removes what it wrote and exits 2.
    """
    try:
        start, end = (_utc(datetime.fromisoformat(moment)) for moment in (from_, to))
    except ValueError as error:
        return fail(f"--from/--to: {error}")
    if start >= end:
        return fail(f"--from ({start.isoformat()}) must be before --to ({end.isoformat()})")
    url = event_store_url(Environment.read())
    where = "standard output" if out == "-" else out
    try:
        if out == "-":
            done = _export_to_stdout(url, start, end)
        else:
            done = _export_to_file(url, start, end, Path(out))
    except ExportNotWritten as error:
        return fail(f"audit export: {error}")
    print(f"exported {done.lines} events recorded in [{start}, {end}) to {where}", file=sys.stderr)
    if done.unchained:
        print(
            f"{done.unchained} of them are not chained yet (no chain hashes): the AuditChain projection "
            "is behind; export again once it has caught up",
            file=sys.stderr,
        )
    return 0


@app.command(name="reconcile")
def reconcile_command(
    *,
    from_: Annotated[str, Parameter(name="--from")],
    to: Annotated[str, Parameter(name="--to")],
    partner: Annotated[str | None, Parameter(name="--partner")] = None,
) -> int:
    """Reconcile the period (--from, --to]: per reserve and asset, opening + postings = closing; every chain
    report matched to its transaction and posting, and the differences by kind. Exit 0 when clean, 1 when
    there are differences.

    Parameters
    ----------
    from_
        Start of the period (excluded), RFC 3339 with an offset, as the history's asOf
        (e.g. 2026-03-01T00:00:00Z).
    to
        End of the period (included), RFC 3339 with an offset.
    partner
        The partner whose book to reconcile; every partner's, each on its own, when left out.
    """
    try:
        period = period_of(from_, to)
    except ApiProblem as problem:
        return fail(f"audit reconcile: {problem.detail}")
    done = reconcile_ledger(event_store_url(Environment.read()), partner, period)
    for reconciliation in done:
        print_reconciliation(reconciliation)
    differences = sum(len(r.differences) for r in done)
    print("audit reconcile: " + (f"{differences} difference(s)" if differences else "clean"))
    return 1 if differences else 0


def print_reconciliation(done: Reconciliation, out: TextIO | None = None) -> None:
    """One partner's reconciliation as lines: its reserves, its reports, then its differences."""
    out = out or sys.stdout
    period = done.period
    print(f"partner {done.partner}: ({period.start.isoformat()}, {period.end.isoformat()}]", file=out)
    for r in done.reserves:
        mark = "OK" if r.balanced else "FAILED"
        line = f"{r.name} {r.code}: {r.opening} + {r.postings} = {r.closing}"
        print(f"  {mark:<7} reserve {line}", file=out)
    for report in done.reports:
        posted = {True: "posted", False: "NOT POSTED", None: "posts nothing"}[report.posted]
        print(
            f"  report  {report.report} {report.tx_id} {report.transaction_code} {report.event} "
            f"{report.confirmations} confirmation(s), {posted}",
            file=out,
        )
    for difference in done.differences:
        print(f"  DIFF    {difference.kind}: {difference.detail}", file=out)
