"""Every answer names its request: `X-Request-Id` (the request's own when well formed, else a new one), the
same id in the access log line and in a problem's `requestId`; replays of an Idempotency-Key's answer carry
the replaying request's id. In-process, against the real app on the session's database."""

from __future__ import annotations

import logging
import re
import uuid

import pytest

from interface.http.request_ids import new_request_id, request_id_for

UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}")


def access_lines(caplog: pytest.LogCaptureFixture, path: str) -> list[logging.LogRecord]:
    return [
        record
        for record in caplog.records
        if record.name == "broker_ledger.access" and getattr(record, "path", None) == path
    ]


def test_an_answer_to_a_request_without_an_id_carries_a_new_one_each_time(client, broker):
    first = client.get("/prices/EUR", headers=broker)
    second = client.get("/prices/EUR", headers=broker)

    assert first.status_code == second.status_code == 200
    assert UUID.fullmatch(first.headers["x-request-id"])
    assert UUID.fullmatch(second.headers["x-request-id"])
    assert first.headers["x-request-id"] != second.headers["x-request-id"]


@pytest.mark.parametrize(
    "sent", ["3f2c9a1e-0b7d-4c55-9e4f-1a2b3c4d5e6f", "req_01HZX3K8.gw-7:42", "a", "x" * 128]
)
def test_a_well_formed_incoming_id_is_kept(client, broker, sent):
    answer = client.get("/prices/EUR", headers={**broker, "X-Request-Id": sent})

    assert answer.status_code == 200
    assert answer.headers.get_list("x-request-id") == [sent]


@pytest.mark.parametrize(
    "sent",
    [b"", b"x" * 129, b"two words", b'quo"te', b"semi;colon", b"<script>", b"caf\xc3\xa9", b"tab\there"],
)
def test_a_malformed_incoming_id_is_replaced_never_echoed(client, broker, caplog, sent):
    with caplog.at_level(logging.INFO, logger="broker_ledger.access"):
        answer = client.get("/prices/EUR", headers=[*broker.items(), ("X-Request-Id", sent)])

    assert answer.status_code == 200
    given = answer.headers.get_list("x-request-id")
    assert len(given) == 1 and UUID.fullmatch(given[0]), given
    assert [line.request_id for line in access_lines(caplog, "/prices/EUR")] == given


def test_an_id_sent_twice_is_replaced(client, broker):
    headers = [*broker.items(), ("X-Request-Id", "first"), ("X-Request-Id", "second")]

    answer = client.get("/prices/EUR", headers=headers)

    assert UUID.fullmatch(answer.headers["x-request-id"])


def test_the_rule_of_a_well_formed_id():
    assert request_id_for(b"A-z_0.9:") == "A-z_0.9:"
    assert request_id_for(b"line\nbreak") != "line\nbreak"
    assert request_id_for(b"ok\n") != "ok\n"  # the whole value, not a line of it
    assert UUID.fullmatch(request_id_for(None))


def test_new_ids_are_random_version_4_uuids_as_python_writes_them():
    made = [new_request_id() for _ in range(2000)]

    assert len(set(made)) == len(made)
    for text in made:
        parsed = uuid.UUID(text)
        assert (parsed.version, parsed.variant, str(parsed)) == (4, uuid.RFC_4122, text)


def test_the_access_log_line_and_the_problem_body_name_the_answers_id(client, broker, caplog):
    path = f"/customer/nobody-{uuid.uuid4().hex[:8]}"
    with caplog.at_level(logging.INFO, logger="broker_ledger.access"):
        answer = client.get(path, headers=broker)

    assert answer.status_code == 404, answer.text
    request_id = answer.headers["x-request-id"]
    assert answer.json()["requestId"] == request_id
    [line] = access_lines(caplog, path)
    assert line.request_id == request_id
    assert request_id in line.getMessage()


def test_a_kept_id_is_the_one_the_problem_and_the_log_name(client, broker, caplog):
    path = f"/customer/nobody-{uuid.uuid4().hex[:8]}"
    with caplog.at_level(logging.INFO, logger="broker_ledger.access"):
        answer = client.get(path, headers={**broker, "X-Request-Id": "broker-trace-0042"})

    assert answer.headers["x-request-id"] == "broker-trace-0042"
    assert answer.json()["requestId"] == "broker-trace-0042"
    assert [line.request_id for line in access_lines(caplog, path)] == ["broker-trace-0042"]


@pytest.mark.parametrize(
    ("path", "status"),
    [("/no/such/path", 404), ("/prices/EUR", 401), ("/schema/no-such-page", 404)],
    ids=["unknown path, before routing", "no token, refused by middleware", "unknown page of the document"],
)
def test_refusals_before_any_route_runs_name_their_request_too(client, path, status):
    answer = client.get(path, headers={"X-Request-Id": "early-1"})

    assert answer.status_code == status
    assert answer.headers["x-request-id"] == "early-1"
    assert answer.json()["requestId"] == "early-1"


def test_html_pages_and_operations_answers_carry_an_id(client):
    page = client.get("/console/sign-in", headers={"X-Request-Id": "page-1"})
    live = client.get("/health/live")
    metrics = client.get("/metrics")

    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert page.headers["x-request-id"] == "page-1"
    assert UUID.fullmatch(live.headers["x-request-id"])
    assert UUID.fullmatch(metrics.headers["x-request-id"])


def test_a_replayed_answer_carries_the_replaying_requests_id(client, broker):
    body = {"customerCode": f"rid-{uuid.uuid4().hex[:12]}", "trustLevel": "Basic"}
    key = {"Idempotency-Key": f"rid-{uuid.uuid4().hex}"}

    first = client.post("/customer", json=body, headers={**broker, **key, "X-Request-Id": "made-1"})
    replay = client.post("/customer", json=body, headers={**broker, **key, "X-Request-Id": "replay-1"})

    assert first.status_code == replay.status_code == 201, replay.text
    assert replay.headers["idempotent-replayed"] == "true"
    assert first.headers.get_list("x-request-id") == ["made-1"]
    assert replay.headers.get_list("x-request-id") == ["replay-1"]
    assert replay.content == first.content


def test_a_replayed_problem_is_the_stored_one_its_body_naming_the_request_that_made_it(client, broker):
    body = {"customerCode": f"rid-{uuid.uuid4().hex[:12]}", "trustLevel": "Basic"}
    assert client.post("/customer", json=body, headers=broker).status_code == 201
    key = {"Idempotency-Key": f"rid-{uuid.uuid4().hex}"}

    refused = client.post("/customer", json=body, headers={**broker, **key, "X-Request-Id": "made-2"})
    replay = client.post("/customer", json=body, headers={**broker, **key, "X-Request-Id": "replay-2"})

    assert refused.status_code == replay.status_code == 409, replay.text
    assert replay.headers["idempotent-replayed"] == "true"
    assert refused.json()["requestId"] == "made-2"
    assert replay.content == refused.content  # byte for byte what the key keeps
    assert replay.headers.get_list("x-request-id") == ["replay-2"]


def test_a_refusal_in_place_of_a_keyed_answer_names_the_current_request(client, broker):
    body = {"customerCode": f"rid-{uuid.uuid4().hex[:12]}", "trustLevel": "Basic"}
    key = {"Idempotency-Key": f"rid-{uuid.uuid4().hex}"}
    assert client.post("/customer", json=body, headers={**broker, **key}).status_code == 201
    other = {**body, "customerCode": f"rid-{uuid.uuid4().hex[:12]}"}

    reused = client.post("/customer", json=other, headers={**broker, **key, "X-Request-Id": "reuse-1"})

    assert reused.status_code == 422, reused.text
    assert reused.json()["code"] == "idempotency_key_reused"
    assert reused.json()["requestId"] == "reuse-1"
    assert reused.headers.get_list("x-request-id") == ["reuse-1"]
