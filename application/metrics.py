"""The service's Prometheus metrics that are counted where things happen (prometheus-client).

Requests are counted by the interface (`interface/observability.py`), group-commit batches by the recorder,
callback outcomes by the sender. What can be read when scraped (projection positions, pool usage) is read
then, by the interface's collectors, rather than counted here.

With several server workers, `serve` sets `PROMETHEUS_MULTIPROC_DIR` before they start, and each worker writes
its counts there; `GET /metrics` adds up every worker's.
"""

from __future__ import annotations

from prometheus_client import Counter, Histogram

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
GROUP_COMMIT_SAVES = Histogram(
    "broker_ledger_group_commit_batch_saves",
    "Saves written together in one transaction of the event store",
    buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256),
)
CALLBACK_ATTEMPTS = Counter(
    "broker_ledger_callback_attempts",
    "Callback deliveries tried, by outcome (delivered, failed, stopped)",
    ["outcome"],
)
