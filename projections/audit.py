"""Auditors' tools: `verify` proves the read models, the postings and the event log are what they should
be; `export` writes the history of a period as JSON Lines (see `projections.audit_export`).

`verify` runs three kinds of checks, each reported OK, FAILED (with what differs) or SKIPPED:
(a) every projection of the catalog equals a fresh rebuild. In one REPEATABLE READ snapshot it reads the
    live view's position P and a checksum of each of its tables (a projection commits its tables and its
    position together, so the snapshot holds exactly the state after event P); then it replays the log up
    to P into a temporary schema `audit_<hex>`, checksums the same tables there, and drops the schema. The
    live projection may run on meanwhile: the comparison is at P on both sides.
(b) postings balance: debits equal credits per currency overall, in each partner's books and per event
    (notification id), when a `read.postings` table exists; and no reserve that must not be negative is, in
    any partner's books (`projections.audit_reserves`).
(c) the audit chain: see `projections.audit_chain_check`; and the Merkle tree with its signed checkpoints:
    see `projections.merkle_check`.
(d) every projection keeps up with the log: see `projections.audit_lag`.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

from psycopg.sql import SQL, Identifier

from application.store.database import eventsourcing_env
from application.store.log import EVENTS_SCHEMA, LedgerLog
from projections.audit_chain_check import check_chain
from projections.audit_export import export
from projections.audit_lag import check_projections_keep_up
from projections.audit_reserves import negative_reserves
from projections.audit_sql import (
    FAILED,
    OK,
    SKIPPED,
    Check,
    Connection,
    TableChecksum,
    columns,
    drop_schema,
    rows_only_in,
    small_pool,
    snapshot,
    table_checksum,
    table_exists,
    tracking_position,
)
from projections.base.postgres import READ_SCHEMA, ReadModel
from projections.base.runner import APPLICATION, ProjectionSpec, open_view, replay
from projections.catalog import PROJECTIONS
from projections.merkle_check import check_tree
from projections.status import DEFAULT_STALL_SECONDS

__all__ = ["Check", "Report", "compare_with_rebuild", "export", "verify"]

POSTINGS_TABLE = "postings"
CURRENCY_COLUMNS = ("currency", "currency_code", "code")


@dataclass
class Report:
    checks: list[Check]

    @property
    def ok(self) -> bool:
        return not any(check.failed for check in self.checks)


def verify(
    url: str,
    projections: Sequence[ProjectionSpec] | None = None,
    expected: Sequence[tuple[int, str]] = (),
    stall_seconds: float = DEFAULT_STALL_SECONDS,
) -> Report:
    """Every check, in order; `expected` are (notification id, chain hash) pairs an auditor kept;
    `stall_seconds` the stall threshold of the projections (BROKER_LEDGER_PROJECTION_STALL_SECONDS)."""
    projections = PROJECTIONS if projections is None else projections
    log_app = LedgerLog(env=small_pool(eventsourcing_env(url, EVENTS_SCHEMA)))
    try:
        checks = [
            _guarded(f"read model {spec.name}", lambda spec=spec: compare_with_rebuild(url, log_app, spec))
            for spec in projections
        ]
    finally:
        log_app.close()
    checks.append(_guarded("postings balance", lambda: check_postings(url)))
    checks.append(_guarded("audit chain", lambda: check_chain(url, expected)))
    checks.append(_guarded("merkle tree", lambda: check_tree(url)))
    keeping_up = partial(check_projections_keep_up, url, projections, stall_seconds)
    checks.append(_guarded("projections keep up", keeping_up))
    return Report(checks)


def _guarded(name: str, check: Callable[[], Check]) -> Check:
    """A check that raised (say, an event that no longer decodes) failed, with the error as its detail."""
    try:
        return check()
    except Exception as error:
        return Check(name, FAILED, [f"could not complete: {type(error).__name__}: {error}"])


def live_state(url: str, view: ReadModel) -> tuple[int, dict[str, TableChecksum]]:
    """The view's position and its tables' checksums, from one snapshot."""
    schema = view.datastore.schema
    with snapshot(url) as conn:
        position = tracking_position(conn, schema, view.tracking_table_name, APPLICATION)
        return position, {table: table_checksum(conn, schema, table) for table in view.tables}


def compare_with_rebuild(url: str, log_app: LedgerLog, spec: ProjectionSpec) -> Check:
    """Check (a) for one projection: its live tables at their position P against a rebuild up to P."""
    name = f"read model {spec.name}"
    live = open_view(url, spec)
    try:
        position, live_sums = live_state(url, live)
    finally:
        live.datastore.close()
    schema = f"audit_{uuid.uuid4().hex[:12]}"
    try:
        fresh = open_view(url, spec, schema=schema)
        try:
            replay(log_app, spec, fresh, stop_at=position)
            with snapshot(url) as conn:
                fresh_sums = {table: table_checksum(conn, schema, table) for table in fresh.tables}
            differing = [table for table in live.tables if live_sums[table] != fresh_sums[table]]
            details = _differences(url, live, schema, position, differing, live_sums, fresh_sums)
        finally:
            fresh.datastore.close()
    finally:
        drop_schema(url, schema)
    head = log_app.head()
    if differing:
        return Check(name, FAILED, [f"differs from a rebuild at position {position}:", *details])
    tables = ", ".join(f"{table} ({live_sums[table].rows} rows)" for table in live.tables)
    return Check(name, OK, [f"equal to a rebuild at position {position} (log head {head}): {tables}"])


def _differences(
    url: str,
    live: ReadModel,
    schema: str,
    position: int,
    differing: list[str],
    live_sums: dict[str, TableChecksum],
    fresh_sums: dict[str, TableChecksum],
) -> list[str]:
    """Per differing table its checksums and, if the live view is still at `position`, a few rows."""
    details: list[str] = []
    with snapshot(url) as conn:
        still = tracking_position(conn, READ_SCHEMA, live.tracking_table_name, APPLICATION) == position
        for table in differing:
            details.append(f"{READ_SCHEMA}.{table}: live {live_sums[table]}; rebuilt {fresh_sums[table]}")
            if not still:
                continue
            ours, theirs = Identifier(READ_SCHEMA, table), Identifier(schema, table)
            details += [f"  only live:    {row}" for row in rows_only_in(conn, ours, theirs)]
            details += [f"  only rebuilt: {row}" for row in rows_only_in(conn, theirs, ours)]
    return details


def _unbalanced_partners(conn: Connection, table: Identifier, currency: Identifier, net: SQL) -> list[Any]:
    """Each partner's books must balance on their own (reserves are each partner's own book): the partners
    and currencies whose postings do not sum to zero."""
    return conn.execute(
        SQL(
            "SELECT partner AS p, {0} AS c, {1} AS net FROM {2} GROUP BY partner, {0} HAVING {1} <> 0 "
            "ORDER BY partner, {0} LIMIT 10"
        ).format(currency, net, table)
    ).fetchall()


def check_postings(url: str) -> Check:
    """Check (b): debits equal credits per currency, overall and within each event."""
    name = "postings balance"
    with snapshot(url) as conn:
        if not table_exists(conn, READ_SCHEMA, POSTINGS_TABLE):
            return Check(name, SKIPPED, ["skipped: no postings projection"])
        found = columns(conn, READ_SCHEMA, POSTINGS_TABLE)
        currency = next((column for column in CURRENCY_COLUMNS if column in found), None)
        if currency is None or not {"debit", "credit", "notification_id"} <= set(found):
            return Check(name, FAILED, [f"{READ_SCHEMA}.{POSTINGS_TABLE} has unexpected columns {found}"])
        table, cur = Identifier(READ_SCHEMA, POSTINGS_TABLE), Identifier(currency)
        net = SQL("sum(coalesce(debit, 0)) - sum(coalesce(credit, 0))")
        overall = conn.execute(
            SQL("SELECT {0} AS c, {1} AS net FROM {2} GROUP BY {0} HAVING {1} <> 0 ORDER BY {0}").format(
                cur, net, table
            )
        ).fetchall()
        per_partner = _unbalanced_partners(conn, table, cur, net) if "partner" in found else []
        per_event = conn.execute(
            SQL(
                "SELECT notification_id AS n, {0} AS c, {1} AS net FROM {2} GROUP BY notification_id, {0} "
                "HAVING {1} <> 0 ORDER BY notification_id, {0} LIMIT 10"
            ).format(cur, net, table)
        ).fetchall()
        totals = conn.execute(
            SQL("SELECT count(*) AS rows, count(DISTINCT {}) AS currencies FROM {}").format(cur, table)
        ).fetchone()
        negative = negative_reserves(conn, READ_SCHEMA)
    problems = [f"currency {row['c']}: debits - credits = {row['net']}" for row in overall]
    problems += [f"partner {row['p']}, {row['c']}: debits - credits = {row['net']}" for row in per_partner]
    problems += [f"notification {row['n']}, {row['c']}: debits - credits = {row['net']}" for row in per_event]
    problems += negative
    if problems:
        return Check(name, FAILED, problems)
    assert totals is not None
    return Check(
        name,
        OK,
        [
            f"{totals['rows']} postings in {totals['currencies']} currencies balance, overall, per partner "
            "and per event; no reserve that must not be negative is"
        ],
    )
