"""A projection is handed decoded only the events it does something with; the rest only move its position,
and the audit chain links stored rows without decoding them."""

from __future__ import annotations

from typing import Any
from uuid import uuid4

from eventsourcing.persistence import Notification, Tracking

from projections.audit_chain import AuditChainProjection
from projections.base.runner import handles, process
from projections.callbacks.projection import CallbackOutboxProjection
from projections.ledger_postings import PostingsProjection
from projections.read_models import ReadModelsProjection

RESERVED = "domain.limits:LimitWindow.Reserved"
STAGED = "domain.transaction:Transaction.Staged"
REGISTERED = "domain.customer:Customer.Registered"


class RecordingView:
    def __init__(self) -> None:
        self.skipped: list[int] = []
        self.links: list[tuple[Any, int]] = []

    def skip(self, tracking: Tracking) -> None:
        self.skipped.append(tracking.notification_id)

    def append(self, at: Any, tracking: Tracking) -> None:
        self.links.append((at, tracking.notification_id))


def stored(notification_id: int, topic: str) -> Notification:
    return Notification(
        id=notification_id, originator_id=uuid4(), originator_version=1, topic=topic, state=b"{}"
    )


def never_decoded(notification: Notification) -> Any:
    raise AssertionError(f"event {notification.id} ({notification.topic}) was decoded")


def test_each_projection_reads_the_topics_it_handles_and_no_other() -> None:
    assert handles(ReadModelsProjection, STAGED) and handles(ReadModelsProjection, REGISTERED)
    assert not handles(ReadModelsProjection, RESERVED)
    assert handles(PostingsProjection, STAGED) and not handles(PostingsProjection, REGISTERED)
    assert handles(CallbackOutboxProjection, STAGED) and not handles(CallbackOutboxProjection, REGISTERED)
    assert not handles(CallbackOutboxProjection, RESERVED)


def test_an_event_a_projection_only_skips_moves_its_position_without_being_decoded() -> None:
    for projection_class in (ReadModelsProjection, PostingsProjection, CallbackOutboxProjection):
        view = RecordingView()
        process(projection_class(view=view), stored(7, RESERVED), never_decoded)
        assert view.skipped == [7], projection_class


def test_the_audit_chain_links_a_stored_event_and_decodes_it_only_when_asked_its_time() -> None:
    view = RecordingView()
    decoded: list[int] = []

    class Event:
        timestamp = "the event's time"

    def decode(notification: Notification) -> Any:
        decoded.append(notification.id)
        return Event()

    process(AuditChainProjection(view=view), stored(9, RESERVED), decode)

    [(at, position)] = view.links
    assert (position, decoded) == (9, [])
    assert (at(), decoded) == ("the event's time", [9])
