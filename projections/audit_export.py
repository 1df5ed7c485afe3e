"""`audit export`: the events of a period as JSON Lines, for an external auditor.

With `--partner`, only the events of that partner's aggregates (customers, accounts, transactions, its
reserves...: `projections.event_partners`); without, every event of the ledger. The period (from, to], as
every period of the API and the command line, is judged by each event's own
timestamp (the `timestamp` in its stored state: when the ledger decided it), not by when it was committed.
Lines come in notification order, the log's one global order, so they are not strictly sorted by timestamp
(events saved together take their timestamps moments apart, in the order the aggregates made them). Each
line holds:

    notification_id, aggregate_id, version, type (the event's topic), timestamp,
    data: the event's decoded fields (amounts as JSON numbers, exactly as recorded),
    state: the stored state as text, byte for byte,
    event_hash, previous_chain_hash, chain_hash: as the AuditChain projection recorded them when it
    first saw the event (null for an event it has not chained yet).

An auditor re-verifies any line alone, without our code:

    canonical = f"{notification_id}\\n{aggregate_id}\\n{version}\\n{type}\\n".encode() + state.encode()
    sha256(canonical).hexdigest() == event_hash
    sha256(bytes.fromhex(previous_chain_hash) + canonical).hexdigest() == chain_hash

and compares chain hashes with those kept from earlier exports or `audit verify` runs: an event altered
since it was chained no longer matches. (A state that is not UTF-8 is given as `state_base64` instead.)
"""

from __future__ import annotations

import base64
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TextIO

import msgspec
from psycopg.sql import SQL, Composed, Identifier

from application.store.actors import ACTOR_KEY
from application.store.database import eventsourcing_env
from application.store.log import EVENTS_SCHEMA, LedgerLog
from projections.audit_chain import CHAIN_TABLE, EVENTS_TABLE, GENESIS
from projections.audit_sql import small_pool, snapshot, table_exists
from projections.base.postgres import READ_SCHEMA
from projections.event_partners import partner_of

_encoder = msgspec.json.Encoder(decimal_format="number")


@dataclass(frozen=True)
class Exported:
    lines: int
    unchained: int  # lines without chain hashes: the AuditChain projection had not reached them


def export(
    url: str,
    from_: datetime,
    to: datetime,
    out: TextIO,
    partner: str | None = None,
    partners: Iterable[str] = (),
) -> Exported:
    """Writes every event whose timestamp is in (from_, to] to `out`, one JSON object a line; with `partner`,
    only the events of that partner's aggregates (`projections.event_partners`; `partners`: every partner
    the settings name). Naive datetimes are taken as UTC."""
    start, end = _aware(from_), _aware(to)
    owners: dict[Any, str | None] = {}  # each aggregate's partner, told by its first event (seen first)
    partners = tuple(partners)
    log_app = LedgerLog(env=small_pool(eventsourcing_env(url, EVENTS_SCHEMA)))
    lines = unchained = 0
    try:
        with snapshot(url) as conn, conn.cursor(name="audit_export") as cursor:
            cursor.itersize = 2000
            cursor.execute(_query(table_exists(conn, READ_SCHEMA, CHAIN_TABLE)), {"genesis": GENESIS})
            for row in cursor:
                state = _decode(log_app, row)
                if partner is not None:
                    aggregate = row["originator_id"]
                    if aggregate not in owners:
                        owners[aggregate] = partner_of(row["topic"], aggregate, state, partners)
                    if owners[aggregate] != partner:
                        continue
                timestamp = state.pop("timestamp")
                if not start < timestamp <= end:
                    continue
                out.write(_encoder.encode(_line(row, timestamp, state)).decode() + "\n")
                lines += 1
                unchained += row["chain_hash"] is None
    finally:
        log_app.close()
    return Exported(lines, unchained)


def _aware(moment: datetime) -> datetime:
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment


def _query(chained: bool) -> Composed:
    columns = "e.notification_id, e.originator_id, e.originator_version, e.topic, e.state"
    if not chained:
        return SQL(
            "SELECT " + columns + ", NULL AS event_hash, NULL AS chain_hash, NULL AS previous_chain_hash "
            "FROM {} AS e ORDER BY e.notification_id"
        ).format(EVENTS_TABLE)
    return SQL(
        "SELECT " + columns + ", c.event_hash, c.chain_hash, "
        "CASE WHEN c.seq = 1 THEN %(genesis)s ELSE p.chain_hash END AS previous_chain_hash "
        "FROM {0} AS e LEFT JOIN {1} AS c ON c.notification_id = e.notification_id "
        "LEFT JOIN {1} AS p ON p.seq = c.seq - 1 ORDER BY e.notification_id"
    ).format(EVENTS_TABLE, Identifier(READ_SCHEMA, CHAIN_TABLE))


def _decode(log_app: LedgerLog, row: dict[str, Any]) -> dict[str, Any]:
    """The event's state as the log's mapper decodes it (value objects, Decimals, datetimes), in either
    stored format (see `application.store.msgspec_mapper`)."""
    try:
        return dict(log_app.state_of(row["topic"], bytes(row["state"])))
    except Exception as error:
        raise ValueError(
            f"notification {row['notification_id']} ({row['topic']}) cannot be decoded: {error}; "
            "run `broker-ledger audit verify`"
        ) from error


def _line(row: dict[str, Any], timestamp: datetime, data: dict[str, Any]) -> dict[str, Any]:
    line: dict[str, Any] = {
        "notification_id": row["notification_id"],
        "aggregate_id": str(row["originator_id"]),
        "version": row["originator_version"],
        "type": row["topic"],
        "timestamp": timestamp,
        "actor": data.pop(ACTOR_KEY, None),  # who caused it (`application.store.actors`), None before actors
        "data": data,
    }
    stored = bytes(row["state"])
    try:
        line["state"] = stored.decode("utf-8")
    except UnicodeDecodeError:
        line["state_base64"] = base64.b64encode(stored).decode()
    line["event_hash"] = row["event_hash"]
    line["previous_chain_hash"] = row["previous_chain_hash"]
    line["chain_hash"] = row["chain_hash"]
    return line
