"""What the HTTP server itself refuses, before the service sees a request (docs/api.md, "What a request must
be"): a request line or headers over 32 KiB together, or a NUL in a header, get uvicorn's plain-text 400
`Invalid HTTP request received.` with `Connection: close`; a head just under the limit is served. Sent over
raw sockets to the e2e server process (`serve`, whose protocol enforces the limit)."""

from __future__ import annotations

import contextlib
import socket
from urllib.parse import urlsplit

import pytest

from interface.http.server_limits import HEAD_LIMIT

REFUSED = "Invalid HTTP request received."


def exchange(base_url: str, head: bytes) -> bytes:
    """Sends `head` (a request without a body) and returns everything the server answers before closing."""
    where = urlsplit(base_url)
    assert where.hostname == "127.0.0.1"
    with socket.create_connection((where.hostname, where.port), timeout=10) as connection:
        # the server may refuse and close before taking it all: its answer is still to be read
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            connection.sendall(head)
        answer = b""
        with contextlib.suppress(ConnectionResetError):
            while chunk := connection.recv(65536):
                answer += chunk
                if b"\r\n\r\n" in answer and b"connection: close" not in answer.lower():
                    break  # a served answer on a kept-alive connection: enough for the status line
    return answer


def request(path: str = "/health/live", **headers: str) -> bytes:
    lines = [f"GET {path} HTTP/1.1", "Host: 127.0.0.1", *(f"{k}: {v}" for k, v in headers.items())]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def assert_refused_by_the_server(answer: bytes) -> None:
    head, _, body = answer.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").lower().split("\r\n")
    assert lines[0] == "http/1.1 400 bad request", answer[:200]
    assert "content-type: text/plain; charset=utf-8" in lines
    assert "connection: close" in lines
    assert body.decode() == REFUSED


@pytest.mark.parametrize("size", [HEAD_LIMIT + 1, 200 * 1024, 1024 * 1024])
def test_headers_over_the_limit_are_refused_by_the_server(base_url: str, size: int) -> None:
    assert_refused_by_the_server(exchange(base_url, request(X_Padding="a" * size)))


def test_a_head_just_under_the_limit_is_served(base_url: str) -> None:
    answer = exchange(base_url, request(X_Padding="a" * (HEAD_LIMIT - 1024)))
    assert answer.startswith(b"HTTP/1.1 200 OK"), answer[:200]


def test_a_path_of_100_kb_is_refused_by_the_server(base_url: str) -> None:
    assert_refused_by_the_server(exchange(base_url, request("/health/live?" + "a" * 100 * 1024)))


def test_a_nul_in_a_header_is_refused_by_the_server(base_url: str) -> None:
    assert_refused_by_the_server(exchange(base_url, request(X_Note="a\x00b")))
