"""What an operator sees of a running API: an access log line per request and `GET /metrics`.

Every answer carries its request's `X-Request-Id` (`interface.http.request_ids`: the one the request brought
when well formed, else a new one), and, when the rate limit counted the request, its `RateLimit-Policy` and
`RateLimit` fields (`interface.http.rate_limits`): both are added here, to whatever answer leaves, so answers
made before routing, refusals raised by middleware, replayed answers of an Idempotency-Key and the console's
pages carry them too (a replay the current request's id, never the stored request's).

The access log (logger `broker_ledger.access`) writes one line per answered request with its method, route
(the path template, so codes do not multiply the series), status, client id, duration, Idempotency-Key and
request id;
the same request is counted in `broker_ledger_requests_total` and timed in
`broker_ledger_request_duration_seconds`. Both wrap the whole application, so refusals made before routing
(404, 405, text that cannot be stored) are seen too.

`GET /metrics` answers Prometheus' text format: the counters, each defined where it is counted (requests here,
group-commit batches in the store, callback attempts by the delivery worker), added up over every worker when
`PROMETHEUS_MULTIPROC_DIR` is set (by `serve --workers N`; read at start, `interface.environment`); and, read
at scrape time, each projection's position and lag behind the event log and this worker's connection pools.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from litestar import Response, get
from litestar.di import NamedDependency
from litestar.params import SkipValidation
from litestar.types import Message, Receive, Scope, Send
from prometheus_client import REGISTRY, CollectorRegistry, Counter, Histogram, generate_latest, multiprocess
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector
from psycopg import sql

from application.store.log import EVENTS_SCHEMA
from interface.http.rate_limits import FIELDS as RATE_LIMIT_FIELDS
from interface.http.request_head import CaseInsensitiveLitestar
from interface.http.request_ids import HEADER as REQUEST_ID_HEADER
from interface.http.request_ids import keep_request_id, request_id_for
from projections.base.postgres import READ_SCHEMA

REQUESTS = Counter(
    "broker_ledger_requests",
    "HTTP requests answered, by method, route (the path template) and status",
    ["method", "route", "status"],
)
REQUEST_SECONDS = Histogram(
    "broker_ledger_request_duration_seconds",
    "Time from a request's arrival to the last byte of its answer, by method, route and status",
    ["method", "route", "status"],
    buckets=(0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0),
)

access_log = logging.getLogger("broker_ledger.access")
PROMETHEUS_TEXT = "text/plain; version=0.0.4"  # litestar adds "; charset=utf-8" to a text/ type, once
UNMATCHED = "(unmatched)"  # the route of a request no route took: one series for every unknown path
HEAD = sql.SQL("SELECT coalesce(max(notification_id), 0) FROM {}").format(
    sql.Identifier(EVENTS_SCHEMA, "ledger_events")
)
POSITION = sql.SQL("SELECT coalesce(max(notification_id), 0) FROM {}")


class ObservedLitestar(CaseInsensitiveLitestar):
    """The application, with each HTTP request given its id, its answer the id and rate-limit fields, and the
    request logged and counted once its answer has been sent."""

    async def __call__(self, scope: Any, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await super().__call__(scope, receive, send)
            return
        started = time.perf_counter()
        incoming, key = _request_headers(scope["headers"])
        request_id = request_id_for(incoming)
        id_field = (REQUEST_ID_HEADER, request_id.encode("ascii"))
        keep_request_id(scope, request_id)  # in the scope's state, which litestar's own setdefault keeps
        state = scope["state"]  # where the rate limit leaves its fields (read here: no call into it)
        status = [500]

        async def observed_send(message: Message) -> None:
            if message["type"] == "http.response.start":
                status[0] = message["status"]
                message["headers"] = [
                    *message.get("headers", ()),
                    id_field,
                    *state.get(RATE_LIMIT_FIELDS, ()),
                ]
            await send(message)

        try:
            await super().__call__(scope, receive, observed_send)
        finally:
            record_request(scope, status[0], time.perf_counter() - started, request_id, key)


def _request_headers(headers: Iterable[tuple[bytes, bytes]]) -> tuple[bytes | None, bytes | None]:
    """The request's X-Request-Id (None when it sent none, or more than one) and Idempotency-Key, in one
    pass over its headers."""
    request_id = key = None
    ids = 0
    for name, value in headers:
        if name == REQUEST_ID_HEADER:
            request_id = value
            ids += 1
        elif name == b"idempotency-key":
            key = value
    return (request_id if ids == 1 else None), key


# the request metrics' series by (method, route, status): a route's series is looked up once, not labelled
# again (argument checks, a lock, a tuple of strings) on every request
_SERIES: dict[tuple[str, str, int], tuple[Any, Any]] = {}


def _series(method: str, route: str, status: int) -> tuple[Any, Any]:
    series = _SERIES.get((method, route, status))
    if series is None:
        labels = (method, route, str(status))
        series = _SERIES[method, route, status] = (
            REQUESTS.labels(*labels),
            REQUEST_SECONDS.labels(*labels),
        )
    return series


def record_request(
    scope: Scope, status: int, seconds: float, request_id: str, key: bytes | None = None
) -> None:
    route = scope.get("path_template") or UNMATCHED
    method = scope["method"]
    requests, durations = _series(method, route, status)
    requests.inc()
    durations.observe(seconds)
    principal = scope.get("user")
    access_log.info(
        "%s %s %d %.1f ms %s",
        method,
        scope["path"],
        status,
        seconds * 1000,
        request_id,
        extra={
            "method": method,
            "route": route,
            "path": scope["path"],
            "status": status,
            "client_id": getattr(principal, "client_id", None),
            "duration_ms": round(seconds * 1000, 2),
            "idempotency_key": key.decode("latin-1") if key else None,
            "request_id": request_id,
        },
    )


@get(
    "/metrics",
    operation_id="metrics",
    tags=["Operations"],
    exclude_from_auth=True,
    include_in_schema=False,
    sync_to_thread=True,
)
def metrics(
    api_pool: NamedDependency[SkipValidation[Any]],
    projection_names: NamedDependency[tuple[str, ...]],
    pools: NamedDependency[SkipValidation[Callable[[], dict[str, Any]]]],
    metrics_dir: NamedDependency[str | None],
) -> Response[bytes]:
    """Prometheus' text format: counters, histograms and what is read when scraped."""
    registry = CollectorRegistry()
    if metrics_dir:
        multiprocess.MultiProcessCollector(registry, path=metrics_dir)
    else:
        for collector in list(REGISTRY._collector_to_names):
            registry.register(collector)
    registry.register(ProjectionPositions(api_pool, projection_names))
    registry.register(PoolUsage(pools))
    return Response(generate_latest(registry), media_type=PROMETHEUS_TEXT)


class ProjectionPositions(Collector):
    """Each projection's position (the last notification id it applied) and its lag behind the log's head."""

    def __init__(self, pool: Any, names: Iterable[str]) -> None:
        self.pool = pool
        self.names = list(names)

    def collect(self) -> Iterator[GaugeMetricFamily]:
        head, positions = self._read()
        yield GaugeMetricFamily("broker_ledger_event_log_head", "Notification id of the newest event", head)
        position = GaugeMetricFamily(
            "broker_ledger_projection_position",
            "Last notification id a projection applied",
            labels=["projection"],
        )
        lag = GaugeMetricFamily(
            "broker_ledger_projection_lag_events",
            "Events a projection has yet to apply",
            labels=["projection"],
        )
        for name, at in positions.items():
            position.add_metric([name], at)
            lag.add_metric([name], max(head - at, 0))
        yield position
        yield lag

    def _read(self) -> tuple[int, dict[str, int]]:
        with self.pool.connection() as conn:
            head = conn.execute(HEAD).fetchone()[0]
            positions = {}
            for name in self.names:
                table = sql.Identifier(READ_SCHEMA, f"{name.lower()}_tracking")
                if conn.execute("SELECT to_regclass(%s)", [table.as_string(conn)]).fetchone()[0] is None:
                    positions[name] = 0  # not created yet: nothing applied
                    continue
                positions[name] = conn.execute(POSITION.format(table)).fetchone()[0]
        return int(head), positions


class PoolUsage(Collector):
    """This worker's connection pools: connections open and in use, and requests waiting for one."""

    def __init__(self, pools: Callable[[], dict[str, Any]]) -> None:
        self.pools = pools

    def collect(self) -> Iterator[GaugeMetricFamily]:
        labels = ["pool", "pid"]
        size = GaugeMetricFamily("broker_ledger_pool_connections", "Connections held open", labels=labels)
        busy = GaugeMetricFamily(
            "broker_ledger_pool_connections_in_use", "Connections lent out", labels=labels
        )
        waiting = GaugeMetricFamily("broker_ledger_pool_requests_waiting", "Requests waiting", labels=labels)
        pid = str(os.getpid())
        for name, pool in self.pools().items():
            stats = pool.get_stats()
            size.add_metric([name, pid], stats.get("pool_size", 0))
            busy.add_metric([name, pid], stats.get("pool_size", 0) - stats.get("pool_available", 0))
            waiting.add_metric([name, pid], stats.get("requests_waiting", 0))
        yield size
        yield busy
        yield waiting
