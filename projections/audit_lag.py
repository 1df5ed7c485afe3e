"""Check (d) of `audit verify`: every projection keeps up with the event log. A read model equal to a rebuild
at its own position (check (a)) may still be far behind the log: a projection that failed on an event stops
there. This check fails when a projection has a recorded failure, or when the oldest event it has not applied
is older than the stall threshold (see `projections.status`); a few recent events not applied yet pass."""

from __future__ import annotations

from collections.abc import Sequence

import psycopg

from application.store.database import eventsourcing_env
from application.store.log import EVENTS_SCHEMA, LedgerLog
from projections import status
from projections.audit_sql import FAILED, OK, Check, small_pool
from projections.base.runner import ProjectionSpec

NAME = "projections keep up"


def check_projections_keep_up(
    url: str, projections: Sequence[ProjectionSpec], threshold: float = status.DEFAULT_STALL_SECONDS
) -> Check:
    """Whether every projection of `projections` keeps up: none has a recorded failure or an unapplied event
    older than `threshold` seconds."""
    log_app = LedgerLog(env=small_pool(eventsourcing_env(url, EVENTS_SCHEMA)))
    try:
        head = log_app.head()
        with psycopg.connect(url, autocommit=True) as conn:
            names = [spec.name for spec in projections]
            found = status.states(conn, names, head, status.event_time(log_app))
    finally:
        log_app.close()
    stalled = [state for state in found if state.stalled(threshold)]
    if stalled:
        return Check(
            NAME,
            FAILED,
            [f"stalled (threshold {threshold:g} s): {state.describe()}" for state in stalled],
        )
    return Check(NAME, OK, [f"every projection within {threshold:g} s of the log head {head}"])
