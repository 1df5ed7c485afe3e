"""A request must arrive in time (`interface/http/server_limits.py`): a head or body sent too slowly is
answered 408
with a problem and its connection closed, a connection that sends nothing is closed, and a request that
arrives in time is served. On uvicorn with the server's own protocol, over real sockets, with an app that
echoes the size of the body it read; the limits are half a second here."""

from __future__ import annotations

import json
import select
import socket
import threading
import time
from collections.abc import Iterator

import pytest
import uvicorn

from interface.http.server_limits import limited_protocol

HEAD_SECONDS = 0.5
BODY_SECONDS = 0.5
SLACK = 1.0  # the loop's timer and the test's own pace


class EchoApp:
    """Answers 200 with the size of the body it read; remembers whether a request's client went away."""

    def __init__(self) -> None:
        self.disconnects = 0

    async def __call__(self, scope, receive, send) -> None:
        size, more = 0, True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                self.disconnects += 1
                return
            size += len(message.get("body", b""))
            more = message.get("more_body", False)
        body = str(size).encode()
        headers = [(b"content-length", b"%d" % len(body))]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": body})


@pytest.fixture(scope="module")
def echo_app() -> EchoApp:
    return EchoApp()


@pytest.fixture(scope="module")
def address(echo_app: EchoApp) -> Iterator[tuple[str, int]]:
    config = uvicorn.Config(
        echo_app,
        host="127.0.0.1",
        port=0,
        http=limited_protocol(HEAD_SECONDS, BODY_SECONDS),
        lifespan="off",
        log_level="error",
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        assert time.monotonic() < deadline, "the server did not start"
        time.sleep(0.01)
    yield server.servers[0].sockets[0].getsockname()[:2]
    server.should_exit = True
    thread.join(timeout=10)


def connect(address: tuple[str, int]) -> socket.socket:
    return socket.create_connection(address, timeout=HEAD_SECONDS + BODY_SECONDS + 5)


def read_until_closed(connection: socket.socket) -> bytes:
    received = b""
    while chunk := connection.recv(65536):
        received += chunk
    return received


def problem_of(answer: bytes) -> tuple[str, dict[str, str], dict]:
    head, _, body = answer.partition(b"\r\n\r\n")
    status, *lines = head.decode().split("\r\n")
    headers = {name.lower(): value for name, _, value in (line.partition(": ") for line in lines)}
    return status, headers, json.loads(body)


def test_a_head_sent_a_byte_at_a_time_is_answered_408_within_the_head_limit(address):
    with connect(address) as connection:
        started = time.monotonic()
        connection.sendall(b"POST /buy HTTP/1.1\r\nHost: ledger\r\n")
        for byte in b"X-Slow: " + b"a" * 100:
            if select.select([connection], [], [], 0.05)[0]:  # the server's answer has come
                break
            connection.sendall(bytes([byte]))
        status, headers, problem = problem_of(read_until_closed(connection))

    assert time.monotonic() - started < HEAD_SECONDS + SLACK
    assert status == "HTTP/1.1 408 Request Timeout"
    assert headers["content-type"] == "application/problem+json"
    assert headers["connection"] == "close"
    assert problem["code"] == "request_timeout"
    assert problem["detail"] == "the request line and headers did not arrive within 0.5 s"
    assert problem["requestId"] == headers["x-request-id"] and len(headers["x-request-id"]) == 36


def test_a_body_that_stops_short_is_answered_408_and_the_app_sees_its_client_gone(address, echo_app):
    disconnects = echo_app.disconnects
    with connect(address) as connection:
        started = time.monotonic()
        connection.sendall(b"POST /buy HTTP/1.1\r\nHost: ledger\r\nContent-Length: 10\r\n\r\nabc")
        status, _, problem = problem_of(read_until_closed(connection))

    assert time.monotonic() - started < BODY_SECONDS + SLACK
    assert status == "HTTP/1.1 408 Request Timeout"
    assert problem["status"] == 408
    assert problem["detail"] == "the request body did not arrive within 0.5 s"
    assert echo_app.disconnects == disconnects + 1


def test_a_connection_that_sends_nothing_is_closed_without_an_answer(address):
    with connect(address) as connection:
        started = time.monotonic()
        assert read_until_closed(connection) == b""

    assert time.monotonic() - started < HEAD_SECONDS + SLACK


def test_requests_that_arrive_in_time_are_served_however_long_the_connection_sits_between_them(address):
    with connect(address) as connection:
        for _ in range(2):
            connection.sendall(b"POST /buy HTTP/1.1\r\nHost: ledger\r\nContent-Length: 4\r\n\r\n")
            time.sleep(BODY_SECONDS / 2)
            connection.sendall(b"abcd")
            assert connection.recv(65536).endswith(b"\r\n\r\n4")
            time.sleep(HEAD_SECONDS * 2)  # longer than a head may take, shorter than uvicorn's keep-alive
