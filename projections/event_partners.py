"""Whose an event of the log is: the partner of its aggregate, told by the aggregate's first event.

Every aggregate of a partner names it in its first event or in its id: the first event's `partner` field
(customers, accounts, deposit addresses, limit windows, adjustments, disputed reports), its order's partner
(transactions), or else its id, made from the partner and the first event's own fields by the aggregate's
`create_id` (reserve places and books: `business_id` of the partner and the name or asset). An aggregate none
of these name is the whole ledger's (an address pool), no one partner's.

`audit export --partner` keeps the events of one partner's aggregates; `GET /audit/proof/inclusion` shows a
caller the events of its own partner only.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any
from uuid import UUID

import psycopg
from eventsourcing.utils import resolve_topic
from psycopg.rows import dict_row
from psycopg.sql import SQL

from projections.audit_chain import EVENTS_TABLE

StateOf = Callable[[str, bytes], dict[str, Any]]  # a stored state decoded (`LedgerLog.state_of`)
FIRST_EVENT = SQL("SELECT topic, state FROM {} WHERE originator_id = %s ORDER BY originator_version LIMIT 1")


def partner_of(topic: str, originator_id: UUID, state: dict[str, Any], partners: Iterable[str]) -> str | None:
    """The partner of the aggregate whose first event is of `topic` with the decoded `state`."""
    named = state.get("partner")
    if isinstance(named, str):
        return named
    order = state.get("order")
    if isinstance(getattr(order, "partner", None), str):
        return order.partner
    create_id = getattr(_aggregate_class(topic), "create_id", None)
    if create_id is None:
        return None
    fields = {key: value for key, value in state.items() if key not in ("partner", "id")}
    for partner in partners:
        try:
            if create_id(partner=partner, **fields) == originator_id:
                return partner
        except TypeError:  # a create_id that takes other fields: it names no partner
            return None
    return None


def _aggregate_class(topic: str) -> Any:
    """The aggregate class of an event's topic (`module:Aggregate.Event`), or None."""
    try:
        return resolve_topic(topic.rpartition(".")[0])
    except Exception:
        return None


def partner_of_aggregate(
    conn: psycopg.Connection[Any], originator_id: UUID, state_of: StateOf, partners: Iterable[str]
) -> str | None:
    """The partner of the aggregate `originator_id`, from its first stored event."""
    with conn.cursor(row_factory=dict_row) as cursor:
        row = cursor.execute(FIRST_EVENT.format(EVENTS_TABLE), (originator_id,)).fetchone()
    if row is None:
        return None
    return partner_of(row["topic"], originator_id, state_of(row["topic"], bytes(row["state"])), partners)
