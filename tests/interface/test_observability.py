"""What an operator sees: GET /metrics in Prometheus' text format, an access log line per request, and log
lines as JSON when the output is not a terminal. In-process, against the real app on the session's
database."""

from __future__ import annotations

import json
import logging
import time
import uuid
from pathlib import Path

import anyio
from litestar.testing import TestClient
from prometheus_client.parser import text_string_to_metric_families

from application.logs import JsonLines, formatter_for_output, log_config
from projections.catalog import PROJECTIONS


def samples(client: TestClient) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    answer = client.get("/metrics")
    assert answer.status_code == 200
    assert answer.headers["content-type"].startswith("text/plain")
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(answer.text)
        for sample in family.samples
    }


def test_metrics_say_their_format_and_one_charset(client):
    answer = client.get("/metrics")

    assert answer.headers.get_list("content-type") == ["text/plain; version=0.0.4; charset=utf-8"]


def requests_of(found: dict, method: str, route: str, status: str) -> float:
    labels = frozenset({"method": method, "route": route, "status": status}.items())
    return found.get(("broker_ledger_requests_total", labels), 0.0)


def test_metrics_count_requests_by_route_template_and_status_including_unknown_paths(client):
    # liveness answers 200 whatever the session's database holds (readiness may say 503: a projection
    # behind the events other modules wrote)
    before = samples(client)
    client.get("/health/live")
    client.get("/no/such/path")
    after = samples(client)
    live = ("GET", "/health/live", "200")
    assert requests_of(after, *live) == requests_of(before, *live) + 1
    assert (
        requests_of(after, "GET", "(unmatched)", "404")
        == requests_of(before, "GET", "(unmatched)", "404") + 1
    )
    latency = frozenset({"method": "GET", "route": "/health/live", "status": "200"}.items())
    assert after[("broker_ledger_request_duration_seconds_count", latency)] >= 1


def test_metrics_show_every_projection_position_and_lag_and_the_pools_in_use(client):
    found = samples(client)
    names = {
        dict(labels).get("projection")
        for name, labels in found
        if name == "broker_ledger_projection_lag_events"
    }
    assert names == {spec.name for spec in PROJECTIONS}
    assert any(name == "broker_ledger_event_log_head" for name, _ in found)
    pools = {dict(labels)["pool"] for name, labels in found if name == "broker_ledger_pool_connections"}
    assert pools == {"event_store", "api", "idempotency", "read_models"}


def test_a_write_is_seen_as_a_group_commit_batch(client):
    def batches() -> float:
        return samples(client).get(("broker_ledger_group_commit_batch_saves_count", frozenset()), 0.0)

    before = batches()
    answer = client.post(
        "/customer",
        json={"customerCode": f"metrics-{uuid.uuid4().hex[:12]}", "trustLevel": "Basic"},
        headers=client.headers_of("demo-broker"),
    )
    assert answer.status_code == 201, answer.text
    assert batches() >= before + 1


def test_each_request_writes_one_access_log_line_with_route_status_client_duration_and_key(client, caplog):
    headers = client.headers_of("demo-broker")
    with caplog.at_level(logging.INFO, logger="broker_ledger.access"):
        began = time.perf_counter()
        client.get("/prices/EUR", headers={**headers, "Idempotency-Key": "k-1"})
        took_ms = (time.perf_counter() - began) * 1000
    lines = [record for record in caplog.records if getattr(record, "path", None) == "/prices/EUR"]
    assert len(lines) == 1
    line = lines[0]
    assert line.route.startswith("/prices/{")
    assert line.status == 200
    assert line.client_id == "demo-broker"
    assert line.idempotency_key == "k-1"
    assert 0 < line.duration_ms <= took_ms  # the server's time, within what the client waited


def test_log_lines_are_json_with_their_extra_fields_when_not_on_a_terminal(capsys):
    record = logging.LogRecord("broker_ledger.access", logging.INFO, __file__, 1, "GET / %d", (200,), None)
    record.status = 200
    line = json.loads(JsonLines().format(record))
    assert line["message"] == "GET / 200"
    assert line["status"] == 200
    assert line["level"] == "INFO"
    assert line["logger"] == "broker_ledger.access"
    assert isinstance(formatter_for_output(), JsonLines)  # pytest's stderr is not a terminal


def test_the_log_configuration_routes_uvicorns_loggers_through_the_one_format():
    config = log_config("warning")
    assert config["root"]["level"] == "WARNING"
    assert config["loggers"]["uvicorn.error"]["propagate"] is True
    assert config["loggers"]["uvicorn.access"]["propagate"] is False


def test_a_metrics_directory_is_fresh_for_each_multi_worker_start(tmp_path: Path):
    from interface.cli.serve import fresh_metrics_dir

    (tmp_path / "metrics").mkdir()
    (tmp_path / "metrics" / "counter_1.db").write_bytes(b"old")
    directory = fresh_metrics_dir(tmp_path)
    assert list(directory.iterdir()) == []


def test_a_body_whose_client_went_away_is_counted_as_a_400_not_a_500(client):
    headers = client.headers_of("demo-broker")
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/customer",
        "raw_path": b"/customer",
        "query_string": b"",
        "root_path": "",
        "client": ("127.0.0.1", 50000),
        "server": ("testserver", 80),
        "headers": [
            *((name.lower().encode(), value.encode()) for name, value in headers.items()),
            (b"content-type", b"application/json"),
            (b"content-length", b"64"),
        ],
    }
    messages = iter([{"type": "http.request", "body": b'{"customerCode": ', "more_body": True}])
    started: list[int] = []

    async def receive():
        return next(messages, {"type": "http.disconnect"})

    async def send(message):
        if message["type"] == "http.response.start":
            started.append(message["status"])

    before = samples(client)
    anyio.run(client.app, scope, receive, send)
    after = samples(client)

    assert started == [400]
    route = ("POST", "/customer")
    assert requests_of(after, *route, "400") == requests_of(before, *route, "400") + 1
    assert requests_of(after, *route, "500") == requests_of(before, *route, "500")
