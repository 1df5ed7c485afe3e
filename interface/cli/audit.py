"""`broker-ledger audit verify | export | reconcile | prove`."""

from __future__ import annotations

import base64
import contextlib
import json
import os
import stat
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Annotated, TextIO

import psycopg
from cyclopts import App, Parameter
from psycopg.rows import dict_row

from application.audit_key import load_or_create_audit_key
from interface.cli.main import SettingsOption, event_store_url, fail, settings_or_none, unknown_partner
from interface.environment import Environment
from interface.reconciliation.routes import period_between
from interface.shared.instants import Unreadable, instant
from projections.audit import Report, export, verify
from projections.audit_chain import EVENTS_TABLE, SELECT_STORED
from projections.audit_export import Exported
from projections.audit_verifications import record_verification
from projections.checkpoints import Checkpoint, make_checkpoint
from projections.export_files import OutputFolder, UnsafeOutput, prepare_folder
from projections.merkle import consistency_ranges, inclusion_ranges
from projections.merkle_tree import hashes, leaf_of, root_at, tree_size
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
    balance, (c) the audit chain and the Merkle tree match the log as stored, and every signed checkpoint
    the tree; first sign a checkpoint of the tree as it is. Exit 0 when every check passes, 1 otherwise.

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
    signed = sign_checkpoint(url, environment)
    if signed is not None:
        print(f"checkpoint signed: tree size {signed.tree_size}, root {signed.root}, key {signed.key_id}")
    report = verify(url, expected=expected, stall_seconds=environment.stall_seconds)
    print_report(report)
    record_verification(url, datetime.now(UTC), report.checks)  # for the console's system page
    return 0 if report.ok else 1


def sign_checkpoint(url: str, environment: Environment) -> Checkpoint | None:
    """A checkpoint of the Merkle tree as it is, signed with the audit key of the var directory; None (said
    on stderr) while the tree holds no event."""
    with psycopg.connect(url, autocommit=True, connect_timeout=5) as conn:
        if tree_size(conn) == 0:
            print("no checkpoint signed: the Merkle tree holds no event yet", file=sys.stderr)
            return None
        return make_checkpoint(conn, load_or_create_audit_key(environment.var_dir))


def print_report(report: Report, out: TextIO | None = None) -> None:
    out = out or sys.stdout
    for check in report.checks:
        print(f"{check.status:<7} {check.name}", file=out)
        for detail in check.details:
            print(f"        {detail}", file=out)
    failed = sum(check.failed for check in report.checks)
    print("audit verify: " + (f"{failed} check(s) FAILED" if failed else "all checks passed"), file=out)


Write = Callable[[TextIO], Exported]  # an export of the period chosen, to a stream


class ExportNotWritten(Exception):
    """The export's output could not be written; what was written of it is gone."""


def _export_to_file(write: Write, path: Path) -> Exported:
    """Exports into `path`, creating the folders it lacks. A file is written under a temporary name in its
    folder and renamed into place (`projections.export_files.OutputFolder`), so a failure keeps nothing
    and the file it replaces stays whole until then; a folder or a file that is a symbolic link is refused,
    never written through. A device such as /dev/full, or a pipe, is written in place."""
    try:
        prepare_folder(path.parent)
        folder = OutputFolder(path.parent)
    except UnsafeOutput as error:
        raise ExportNotWritten(str(error)) from None
    except OSError as error:
        raise ExportNotWritten(f"cannot create the folder {path.parent}: {_reason(error)}") from None
    with folder:
        try:
            return _export_into(write, folder, path.name)
        except UnsafeOutput as error:
            raise ExportNotWritten(str(error)) from None
        except OSError as error:
            raise ExportNotWritten(f"cannot write {path}: {_reason(error)}; nothing was kept") from None


def _export_into(write: Write, folder: OutputFolder, name: str) -> Exported:
    found = folder.existing(name)
    if found is not None and _is_device(found.st_mode):
        fd = os.open(name, os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=folder.fd)
        with open(fd, "w", encoding="utf-8") as stream:
            if not _is_device(os.fstat(fd).st_mode):  # something else was put in its place meanwhile
                raise UnsafeOutput(f"{folder.path / name} changed while it was opened: refused")
            return write(stream)
    with folder.replacing(name) as draft:
        return write(draft.text())


def _is_device(mode: int) -> bool:
    return stat.S_ISCHR(mode) or stat.S_ISFIFO(mode)


def _export_to_stdout(write: Write) -> Exported:
    try:
        done = write(sys.stdout)
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


@app.command(name="export")
def export_command(
    *,
    from_: Annotated[str, Parameter(name="--from")],
    to: Annotated[str, Parameter(name="--to")],
    partner: Annotated[str | None, Parameter(name="--partner")] = None,
    out: Annotated[str, Parameter(name="--out")] = "-",
    settings: SettingsOption = None,
) -> int:
    """Write every event recorded in (--from, --to] as JSON Lines, with the chain hashes to re-verify them.

    Parameters
    ----------
    from_
        Start of the period (excluded): an RFC 3339 date-time with an offset, e.g. 2026-03-01T00:00:00Z.
    to
        End of the period (included), likewise; one not after --from is the empty period at --to.
    partner
        Only the events of this partner's aggregates (customers, accounts, transactions, reserves...); every
        event of the ledger when left out. A partner the settings do not name is refused (exit 2).
    out
        File to write; "-" for standard output. Missing folders of its path are created (like mkdir -p);
        a file of that name is replaced. If it cannot be written (a file where a folder should be, no
        permission, a full disk), the command says why, removes what it wrote and exits 2.
    settings
        Settings file, for the partners; default $BROKER_LEDGER_SETTINGS, else settings/demo.toml.
    """
    try:
        period = period_between(instant("--from", from_), instant("--to", to))
    except Unreadable as error:
        return fail(f"audit export: {error}")
    environment = Environment.read()
    loaded = settings_or_none(settings or environment.settings_file)
    if partner is not None and (refusal := _partner_refusal(partner, settings or environment.settings_file)):
        return fail(f"audit export: {refusal}")
    partners = tuple(loaded.ledger.partners) if loaded is not None else ()
    url = event_store_url(environment)
    start, end = period.start, period.end
    write: Write = partial(_export_period, url, start, end, partner, partners)
    where = "standard output" if out == "-" else out
    try:
        done = _export_to_stdout(write) if out == "-" else _export_to_file(write, Path(out))
    except ExportNotWritten as error:
        return fail(f"audit export: {error}")
    whose = f" of partner {partner}" if partner is not None else ""
    print(f"exported {done.lines} events{whose} recorded in ({start}, {end}] to {where}", file=sys.stderr)
    if done.unchained:
        print(
            f"{done.unchained} of them are not chained yet (no chain hashes): the AuditChain projection "
            "is behind; export again once it has caught up",
            file=sys.stderr,
        )
    return 0


def _export_period(
    url: str, start: datetime, end: datetime, partner: str | None, partners: tuple[str, ...], out: TextIO
) -> Exported:
    return export(url, start, end, out, partner=partner, partners=partners)


@app.command(name="reconcile")
def reconcile_command(
    *,
    from_: Annotated[str, Parameter(name="--from")],
    to: Annotated[str, Parameter(name="--to")],
    partner: Annotated[str | None, Parameter(name="--partner")] = None,
    settings: SettingsOption = None,
) -> int:
    """Reconcile the period (--from, --to]: per reserve and asset, opening + postings = closing; every chain
    report matched to its transaction and posting, and the differences by kind. Exit 0 when clean, 1 when
    there are differences.

    Parameters
    ----------
    from_
        Start of the period (excluded): an RFC 3339 date-time with an offset, e.g. 2026-03-01T00:00:00Z.
    to
        End of the period (included), likewise; one not after --from is the empty period at --to.
    partner
        The partner whose book to reconcile; every partner's, each on its own, when left out. A partner
        the settings do not name is refused (exit 2), as `export` refuses it.
    settings
        Settings file, for the partners; default $BROKER_LEDGER_SETTINGS, else settings/demo.toml.
    """
    try:
        period = period_between(instant("--from", from_), instant("--to", to))
    except Unreadable as error:
        return fail(f"audit reconcile: {error}")
    environment = Environment.read()
    if partner is not None and (refusal := _partner_refusal(partner, settings or environment.settings_file)):
        return fail(f"audit reconcile: {refusal}")
    done = reconcile_ledger(event_store_url(environment), partner, period)
    for reconciliation in done:
        print_reconciliation(reconciliation)
    differences = sum(len(r.differences) for r in done)
    print("audit reconcile: " + (f"{differences} difference(s)" if differences else "clean"))
    return 1 if differences else 0


def _partner_refusal(partner: str, settings: Path) -> str | None:
    """Why `partner` cannot be reconciled (the settings do not name it), or None."""
    loaded = settings_or_none(settings)
    if loaded is None:
        return f"cannot check --partner {partner!r}: the settings {settings} have problems (above)"
    return unknown_partner(partner, loaded.ledger.partners)


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


prove = App(name="prove", help="Print an inclusion or a consistency proof of the log's Merkle tree as JSON.")
app.command(prove)


@prove.command(name="inclusion")
def prove_inclusion(
    *, position: int, tree_size_: Annotated[int | None, Parameter(name="--tree-size")] = None
) -> int:
    """The audit path of the event at --position in the tree of the first --tree-size events (default: the
    whole tree), with the event as stored, as GET /audit/proof/inclusion answers it. Exit 2 for a position
    not in the tree or a size beyond it.

    Parameters
    ----------
    position
        The event's position in the log (its notification id).
    tree_size_
        The tree's size: its first N events; default every event the tree holds.
    """
    url = event_store_url(Environment.read())
    with psycopg.connect(url, autocommit=True, row_factory=dict_row) as conn:
        size = tree_size(conn) if tree_size_ is None else tree_size_
        leaf = leaf_of(conn, position) if size <= tree_size(conn) else None
        if leaf is None or leaf[0] >= size:
            return fail(f"audit prove: no event at position {position} among the tree's first {size}")
        event = conn.execute(SELECT_STORED.format(EVENTS_TABLE), (position,)).fetchone()
        path = hashes(conn, inclusion_ranges(leaf[0], size))
    stored = {
        "position": position,
        "originatorId": str(event["originator_id"]) if event else None,
        "originatorVersion": event["originator_version"] if event else None,
        "topic": event["topic"] if event else None,
        "state": base64.b64encode(bytes(event["state"])).decode() if event else None,
    }
    proof = {"position": position, "leafIndex": leaf[0], "treeSize": size, "event": stored}
    print(json.dumps({**proof, "leafHash": leaf[1], "auditPath": path}, indent=2))
    return 0


@prove.command(name="consistency")
def prove_consistency(
    *,
    from_: Annotated[int, Parameter(name="--from")],
    to: Annotated[int | None, Parameter(name="--to")] = None,
) -> int:
    """The proof that the tree of the first --from events is a prefix of the tree of the first --to events
    (default: the whole tree), with both roots, as GET /audit/proof/consistency answers it. Exit 2 for sizes
    out of order or beyond the tree.

    Parameters
    ----------
    from_
        The older tree's size.
    to
        The newer tree's size; default every event the tree holds.
    """
    url = event_store_url(Environment.read())
    with psycopg.connect(url, autocommit=True) as conn:
        size = tree_size(conn)
        second = size if to is None else to
        if not 1 <= from_ <= second <= size:
            return fail(
                f"audit prove: give 1 <= --from ({from_}) <= --to ({second}) <= the tree's size ({size})"
            )
        proof = hashes(conn, consistency_ranges(from_, second))
        roots = root_at(conn, from_), root_at(conn, second)
    answer = {"from": from_, "to": second, "fromRoot": roots[0], "toRoot": roots[1], "proof": proof}
    print(json.dumps(answer, indent=2))
    return 0
