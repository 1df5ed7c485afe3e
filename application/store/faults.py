"""The event store's faults, as the interface meets them: what the library raises when the database cannot
be reached or refuses a statement (eventsourcing's persistence errors), named here so that nothing outside
`application.store` imports the library's persistence (tests/unit/test_layer_rules.py)."""

from __future__ import annotations

from eventsourcing.persistence import InterfaceError, OperationalError, PersistenceError

__all__ = ["InterfaceError", "OperationalError", "PersistenceError"]
