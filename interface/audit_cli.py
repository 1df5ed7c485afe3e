"""`broker-ledger audit verify | export`."""

from __future__ import annotations

import sys
from contextlib import ExitStack
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, TextIO

from cyclopts import App, Parameter

from interface.cli import event_store_url, fail
from projections.audit import Report, export, verify

app = App(name="audit", help="Verify the ledger's integrity and export its history for auditors.")


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
    report = verify(event_store_url(), expected=expected)
    print_report(report)
    return 0 if report.ok else 1


def print_report(report: Report, out: TextIO | None = None) -> None:
    out = out or sys.stdout
    for check in report.checks:
        print(f"{check.status:<7} {check.name}", file=out)
        for detail in check.details:
            print(f"        {detail}", file=out)
    failed = sum(check.failed for check in report.checks)
    print("audit verify: " + (f"{failed} check(s) FAILED" if failed else "all checks passed"), file=out)


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
        File to write; "-" for standard output.
    """
    try:
        start, end = (_utc(datetime.fromisoformat(moment)) for moment in (from_, to))
    except ValueError as error:
        return fail(f"--from/--to: {error}")
    if start >= end:
        return fail(f"--from ({start.isoformat()}) must be before --to ({end.isoformat()})")
    url = event_store_url()
    with ExitStack() as stack:
        stream = sys.stdout if out == "-" else stack.enter_context(Path(out).open("w", encoding="utf-8"))
        done = export(url, start, end, stream)
    where = "standard output" if out == "-" else out
    print(f"exported {done.lines} events recorded in [{start}, {end}) to {where}", file=sys.stderr)
    if done.unchained:
        print(
            f"{done.unchained} of them are not chained yet (no chain hashes): the AuditChain projection "
            "is behind; export again once it has caught up",
            file=sys.stderr,
        )
    return 0
