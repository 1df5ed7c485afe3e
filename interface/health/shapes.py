"""What GET /health answers: ready (200), or a problem naming the projections that stalled (503)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

import msgspec

from interface.http.shapes import Body, Problem

Timestamp = Annotated[datetime, msgspec.Meta(tz=True)]


class ProjectionError(Body):
    """A projection's failure, recorded by the process that runs it, until it applies events again."""

    message: str
    notification_id: int | None  # the event it failed on; null when the failure was not an event's
    failures: int  # in a row
    since: Timestamp
    last_failed_at: Timestamp


class ProjectionHealth(Body):
    name: str
    position: int  # the last notification id it applied
    head: int  # the event log's last notification id
    behind_seconds: float  # age of the oldest event it has not applied; 0 when it has applied all
    stalled: bool
    error: ProjectionError | None


class DatabaseServer(Body):
    """The PostgreSQL server this worker writes to: with a multi-host DATABASE_URL, the one that took the
    connection (`target_session_attrs=read-write` picks the primary)."""

    server: str  # host:port, or the socket directory and port
    primary: bool  # false: a standby (in recovery), where no write commits


class Health(Body):
    status: Literal["ok"]
    database: DatabaseServer


class StalledProblem(Problem, kw_only=True, frozen=True):
    """503 `projection_stalled`: the read models do not keep up; `projections` says where each stands (empty
    for `committer_stalled`, this process's writes do not commit; absent from `database_unavailable`)."""

    projections: list[ProjectionHealth] = []
