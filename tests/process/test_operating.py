"""The real server (`serve --workers 2`) as an operator watches it: GET /metrics adds up both workers'
counts, and its log (written to a file, not a terminal) is one JSON object per line, with an access line per
request."""

from __future__ import annotations

import json
import time
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families


def health_requests_counted(base_url: str) -> float:
    answer = httpx.get(f"{base_url}/metrics", timeout=10)
    assert answer.status_code == 200
    return sum(
        sample.value
        for family in text_string_to_metric_families(answer.text)
        for sample in family.samples
        if sample.name == "broker_ledger_requests_total"
        and sample.labels == {"method": "GET", "route": "/health", "status": "200"}
    )


def test_metrics_of_a_two_worker_server_count_every_request_whichever_worker_took_it(base_url: str):
    before = health_requests_counted(base_url)
    with httpx.Client(timeout=10) as client:  # new connections spread over both workers
        for _ in range(6):
            assert client.get(f"{base_url}/health", headers={"Connection": "close"}).status_code == 200
    assert health_requests_counted(base_url) == before + 6


def test_the_server_log_is_json_lines_with_an_access_line_per_request(base_url: str, server_log: Path):
    httpx.get(f"{base_url}/health", headers={"Idempotency-Key": "log-check"}, timeout=10)
    deadline = time.monotonic() + 5  # the line is written just after the answer is sent
    while True:
        lines = [json.loads(line) for line in server_log.read_text().splitlines() if line.startswith("{")]
        access = [line for line in lines if line["logger"] == "broker_ledger.access"]
        if any(line["route"] == "/health" and line["idempotency_key"] == "log-check" for line in access):
            break
        assert time.monotonic() < deadline, f"no access line for the request; last lines: {lines[-3:]}"
        time.sleep(0.1)
    assert {"time", "level", "logger", "message"} <= set(lines[0])
