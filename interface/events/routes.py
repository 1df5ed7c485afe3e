"""`GET /events?after=&types=&limit=&wait=`: the partner's status changes, of transactions and customers, in
the order of the event log, each with its cursor; a page after the cursor given (from the beginning
without one), at most `limit`, and with `wait`, held until a change comes (long polling).

The query's own refusals, each 400 `malformed_request` naming the parameter: a text that is no cursor of the
feed (`interface/events/cursors.py`), a type not among the feed's (naming them). A cursor past the log's head
is 409 `cursor_ahead_of_log`. The handler runs on the event loop: its reads go to worker threads, its wait
to the process's waker (`interface/events/feed.py`), so a waiting request holds no thread and no connection.
"""

from __future__ import annotations

from typing import Annotated

from litestar import Controller, Request, get
from litestar.di import NamedDependency
from litestar.params import QueryParameter

from domain.errors import quoted_text
from interface.events import shapes as s
from interface.events.cursors import PATTERN, START, position_of
from interface.events.feed import MOST_WAIT_SECONDS, EventsFeed
from interface.events.reading import TYPES, FeedQuery
from interface.http.dependencies import principal
from interface.http.documented import problems, version_header
from interface.http.problems import ApiProblem
from interface.http.security import AUDITOR, BROKER, authorize, roles
from interface.http.shapes import ecma_pattern

MAX_LIMIT = 500
DEFAULT_LIMIT = 100
ONE_TYPE = "(" + "|".join(name.replace(".", r"\.") for name in TYPES) + ")"
TYPES_PATTERN = f"^{ONE_TYPE}(,{ONE_TYPE})*\\Z"


def types_of(value: str | None) -> tuple[str, ...]:
    """The subjects the comma list of types `value` names (every one when absent); 400 for a name that is
    not one of the feed's types, naming them."""
    if value is None:
        return tuple(TYPES.values())
    unknown = [name for name in value.split(",") if name not in TYPES]
    if unknown:
        raise ApiProblem(
            400,
            "malformed_request",
            f"query parameter types={quoted_text(value)} must be a comma list of {', '.join(TYPES)}; "
            f"{', '.join(quoted_text(name) for name in unknown)} is none of them",
        )
    named = set(value.split(","))
    return tuple(subject for name, subject in TYPES.items() if name in named)


class EventsController(Controller):
    path = "/events"
    tags = ["Events"]
    guards = [authorize]
    opt = roles(BROKER, AUDITOR)
    parameters = version_header()

    @get("/", operation_id="listEvents", responses=problems(409))
    async def events(
        self,
        request: Request,
        events_feed: NamedDependency[EventsFeed],
        after: Annotated[
            str | None,
            QueryParameter(
                required=False,
                description="a cursor of the feed (an event's `cursor` or a page's `nextCursor`): the page "
                "starts after it; absent: from the beginning",
                schema_extra={"pattern": ecma_pattern(PATTERN), "minLength": 16, "maxLength": 16},
            ),
        ] = None,
        types: Annotated[
            str | None,
            QueryParameter(
                required=False,
                description=f"a comma list of the types to show, of {', '.join(TYPES)}; absent: all",
                schema_extra={"pattern": ecma_pattern(TYPES_PATTERN)},
            ),
        ] = None,
        limit: Annotated[
            int, QueryParameter(ge=1, le=MAX_LIMIT, description="the most changes a page shows")
        ] = DEFAULT_LIMIT,
        wait: Annotated[
            int,
            QueryParameter(
                ge=0,
                le=MOST_WAIT_SECONDS,
                description="seconds to wait for a change when there is none yet (long polling)",
            ),
        ] = 0,
    ) -> s.EventsPage:
        """The partner's status changes of transactions and customers after the cursor, in the order of the
        event log, each with its cursor, type, time and the transaction (as its callback carries it) or
        customer as it stood right after the change; `nextCursor` reads on, `hasMore` says whether to at
        once. A cursor stays valid for good. With `wait`, a page with nothing yet answers as soon as a
        change comes, or empty when the time is up."""
        position = START if after is None else position_of("after", after)
        query = FeedQuery(after=position, subjects=types_of(types), limit=limit)
        return await events_feed.answer(principal(request).partner, query, wait)
