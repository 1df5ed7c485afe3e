"""A cut-off upload over a real socket: the client sends half the body its Content-Length announces and
hangs up. Only a server process has a socket to cut, so this one of the hostile-input tests
(`tests/e2e/test_hostile_input.py`) runs here; the key the cut-off request named stays free.
"""

from __future__ import annotations

import socket
import uuid
from urllib.parse import urlsplit

import pytest

from tests.e2e.support import ENCODER, Api, Customer, buy_body, expect, open_limit_windows


@pytest.fixture
def buyer(broker: Api, customer: Customer) -> Customer:
    open_limit_windows(broker, customer)
    return customer


def _send_half_the_body_and_close(base_url: str, token: str, key: str, body: bytes) -> None:
    parts = urlsplit(base_url)
    head = (
        f"POST /brokerbuy HTTP/1.1\r\nHost: {parts.netloc}\r\nAuthorization: Bearer {token}\r\n"
        f"api_version: 1.2\r\nContent-Type: application/json\r\nIdempotency-Key: {key}\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode()
    with socket.create_connection((parts.hostname, parts.port), timeout=10) as connection:
        connection.sendall(head + body[: len(body) // 2])


def test_a_cut_off_upload_does_not_burn_its_key(
    broker: Api, buyer: Customer, base_url: str, tokens: dict[str, str]
) -> None:
    key, body = f"hostile-{uuid.uuid4()}", buy_body(buyer, 100)
    _send_half_the_body_and_close(base_url, tokens["demo-broker"], key, ENCODER.encode(body))

    retried = broker.post_json("/brokerbuy", body, {"Idempotency-Key": key})

    assert expect(retried, 201)["transaction"]["status"] == "Sending"
    assert "idempotent-replayed" not in retried.headers
