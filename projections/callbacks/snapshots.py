"""A transaction's state as bytes, so that the outbox projection can keep it between events and a delivery
can present the transaction exactly as it stood after the event it announces.

The state is eventsourcing's own snapshot of the aggregate (`Snapshot.take`, `Snapshot.mutate`), encoded by
the transcoder the event store uses, so the domain's own event handlers rebuild it: nothing here knows what
a transaction holds.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from uuid import UUID

from eventsourcing.domain import Aggregate, Snapshot
from eventsourcing.persistence import DatetimeAsISO, DecimalAsStr, JSONTranscoder, UUIDAsHex

from application.store.transcodings import register_value_objects
from domain.transaction import Transaction

_TRANSCODER = JSONTranscoder()
for _transcoding in (UUIDAsHex(), DecimalAsStr(), DatetimeAsISO()):
    _TRANSCODER.register(_transcoding)
register_value_objects(_TRANSCODER)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class StoredState:
    """What is kept of an aggregate: its id, version, class topic and encoded attributes."""

    id: UUID
    version: int
    topic: str
    state: bytes


def store(aggregate: Aggregate) -> StoredState:
    snapshot = Snapshot.take(aggregate)
    return StoredState(
        id=aggregate.id,
        version=aggregate.version,
        topic=snapshot.topic,
        state=_TRANSCODER.encode(snapshot.state),
    )


def restore(stored: StoredState) -> Transaction:
    snapshot = Snapshot(
        originator_id=stored.id,
        originator_version=stored.version,
        timestamp=_EPOCH,
        topic=stored.topic,
        state=_TRANSCODER.decode(bytes(stored.state)),
    )
    aggregate = snapshot.mutate(None)
    if not isinstance(aggregate, Transaction):
        raise TypeError(f"{stored.topic} is not a transaction")
    return aggregate
