"""Liveness (`GET /health/live`: the process serves) and readiness (`GET /health`: the event store's
committer commits, see `application.store.group_commit.commit_watch`; the database answers; and every
projection keeps up with the event log, see `projections.status`)."""

from __future__ import annotations

from typing import Any

from litestar import Response, get
from litestar.di import NamedDependency
from litestar.openapi.datastructures import ResponseSpec
from psycopg import Connection
from psycopg_pool import ConnectionPool

from application.ledger import Ledger
from interface.health.shapes import DatabaseServer, Health, ProjectionError, ProjectionHealth, StalledProblem
from interface.http.problems import PROBLEM_JSON, ProblemResponse
from projections import status
from projections.status import ProjectionState

STALLED = "projection_stalled"
COMMITTER_STALLED = "committer_stalled"
READ_ONLY = "database_read_only"


@get(
    "/health/live",
    operation_id="liveness",
    tags=["Operations"],
    exclude_from_auth=True,
    security=[{}],
)
async def liveness() -> dict[str, str]:
    """Liveness: 200 while the process serves requests, whatever the database or the projections do."""
    return {"status": "ok"}


@get(
    "/health",
    operation_id="health",
    tags=["Operations"],
    exclude_from_auth=True,
    sync_to_thread=True,
    security=[{}],
    responses={
        503: ResponseSpec(
            data_container=StalledProblem,
            description=(
                "A projection stalled (`projection_stalled`), the event store's committer does not commit"
                " (`committer_stalled`), the server this worker writes to is a standby"
                " (`database_read_only`), or the database is unavailable"
            ),
            media_type=PROBLEM_JSON,
            generate_examples=False,
        )
    },
)
def health(
    ledger: NamedDependency[Ledger],
    api_pool: NamedDependency[ConnectionPool],
    projection_names: NamedDependency[tuple[str, ...]],
    stall_seconds: NamedDependency[float],
) -> Response[Health]:
    """Readiness: this process's writes commit (else 503 `committer_stalled`), the database answers and is
    the primary (else 503 `database_read_only`; 200 names the server in `database`), and no projection has a
    recorded failure or an unapplied event older than BROKER_LEDGER_PROJECTION_STALL_SECONDS (30 by
    default); else 503 `projection_stalled`."""
    if why := ledger.committer_stalled():
        return _committer_stalled(why)
    threshold = stall_seconds
    with api_pool.connection() as conn:
        database = database_server(conn)
        head = ledger.head()
        found = status.states(conn, projection_names, head, status.event_time(ledger))
    if not database.primary:
        return _unready(
            READ_ONLY,
            "Database is a standby",
            f"the server this worker writes to ({database.server}) is a standby: no write can commit there",
            [f"{database.server} is in recovery"],
        )
    stalled = [one for one in found if one.stalled(threshold)]
    if not stalled:
        return Response(Health(status="ok", database=database))
    detail = "; ".join(one.describe() for one in stalled)
    return _unready(
        STALLED,
        "Projection stalled",
        f"the read models do not keep up with the event log: {detail}",
        [one.describe() for one in stalled],
        [_projection(one, threshold) for one in found],
    )


def database_server(conn: Connection[Any]) -> DatabaseServer:
    """The server `conn` is on (the primary a multi-host URL picked, or its only one) and whether it is the
    primary."""
    row = conn.execute("SELECT pg_is_in_recovery()").fetchone()
    in_recovery = bool(row and row[0])
    return DatabaseServer(server=f"{conn.info.host}:{conn.info.port}", primary=not in_recovery)


def _committer_stalled(why: str) -> Response[Health]:
    """503 `committer_stalled`: the writes of this process do not commit (told without asking the database,
    which may be what holds them)."""
    return _unready(COMMITTER_STALLED, "Committer stalled", f"writes do not commit: {why}", [why])


def _unready(
    code: str, title: str, detail: str, errors: list[str], projections: list[ProjectionHealth] | None = None
) -> Response[Health]:
    problem = StalledProblem(
        type=f"urn:broker-ledger:problem:{code}",
        title=title,
        status=503,
        detail=detail,
        code=code,
        errors=errors,
        projections=projections or [],
    )
    return ProblemResponse(problem, status_code=503, media_type=PROBLEM_JSON, headers={"Retry-After": "5"})


def _projection(state: ProjectionState, threshold: float) -> ProjectionHealth:
    failure = state.failure
    return ProjectionHealth(
        name=state.name,
        position=state.position,
        head=state.head,
        behind_seconds=round(state.behind_seconds, 3),
        stalled=state.stalled(threshold),
        error=None
        if failure is None
        else ProjectionError(
            message=failure.error,
            notification_id=failure.notification_id,
            failures=failure.failures,
            since=failure.since,
            last_failed_at=failure.failed_at,
        ),
    )
