"""The events feed (`GET /events`): a partner's status changes of transactions and customers in the order of
the event log, each with a cursor that stays valid for good, read from the feed's index
(`projections/events_feed.py`) and the log, with long polling on one waker per process: routes, shapes,
cursors, the reading of a page, the waker, and `FEATURE`, what the app lists of it."""

from __future__ import annotations

from interface.events import shapes
from interface.events.routes import EventsController
from interface.shared.feature import Feature

FEATURE = Feature(
    name="events",
    route_handlers=[EventsController],
    own_codes={"listEvents": {409: ["cursor_ahead_of_log"]}},
    shapes=[shapes],
)
