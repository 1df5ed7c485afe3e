"""A minimal aggregate for the tests of the event store's plumbing (database wiring, group commit)."""

from __future__ import annotations

from eventsourcing.domain import Aggregate, event


class Note(Aggregate):
    @event("Written")
    def __init__(self, text: str) -> None:
        self.text = text

    @event("Amended")
    def amend(self, text: str) -> None:
        self.text = text
