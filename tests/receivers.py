"""Callback receivers for tests: real HTTP servers on 127.0.0.1 (pytest-httpserver, threaded) that record
every request and answer as a test tells them, and a bare TCP listener that counts connections."""

from __future__ import annotations

import contextlib
import json
import random
import re
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_httpserver import HTTPServer
from standardwebhooks import Webhook
from werkzeug import Request, Response

from tests.e2e.support import local_callback_settings


@dataclass(frozen=True)
class Received:
    event_id: str
    body: bytes
    headers: dict[str, str]
    status: int  # what the receiver answered
    stalled: bool  # answered only after a stall (past the sender's timeout)

    @property
    def ok(self) -> bool:
        """Seen by the sender as delivered."""
        return 200 <= self.status < 300 and not self.stalled

    def verified(self, secret: str) -> dict[str, Any]:
        """The body, after checking the Standard Webhooks signature as a receiver would."""
        return Webhook(secret).verify(self.body, self.headers)

    @property
    def payload(self) -> dict[str, Any]:
        return json.loads(self.body)


class Receiver:
    """Answers each request with `answer(event_id, number of requests seen for it before)`: a status, or
    None for 204. A negative status stalls for `stall_seconds` and then answers 204."""

    def __init__(
        self,
        answer: Callable[[str, int], int | None] | None = None,
        stall_seconds: float = 1.0,
        headers: dict[str, str] | None = None,
    ) -> None:
        self.answer = answer or (lambda event_id, seen: None)
        self.stall_seconds = stall_seconds
        self.headers = headers or {}
        self.received: list[Received] = []
        self._lock = threading.Lock()
        self.url = ""

    def __call__(self, request: Request) -> Response:
        event_id = request.headers.get("webhook-id", "")
        with self._lock:
            seen = sum(1 for item in self.received if item.event_id == event_id)
            status = self.answer(event_id, seen) or 204
        stalled = status < 0
        if stalled:
            time.sleep(self.stall_seconds)
            status = 204
        with self._lock:
            self.received.append(
                Received(event_id, request.get_data(), dict(request.headers), status, stalled)
            )
        return Response(status=status, headers=self.headers)

    def snapshot(self) -> list[Received]:
        with self._lock:
            return list(self.received)

    def delivered_ids(self) -> set[str]:
        return {item.event_id for item in self.snapshot() if item.ok}


def flaky(
    fail_rate: float = 0.3, stall_rate: float = 0.05, seed: int = 7
) -> Callable[[str, int], int | None]:
    """Fails `fail_rate` of the requests (500, 502, 503 or 429) and stalls `stall_rate` of them."""
    rng = random.Random(seed)

    def answer(event_id: str, seen: int) -> int | None:
        roll = rng.random()
        if roll < stall_rate:
            return -1
        if roll < stall_rate + fail_rate:
            return rng.choice([500, 502, 503, 429])
        return None

    return answer


@contextlib.contextmanager
def receiving(receiver: Receiver, url_host: str = "127.0.0.1", path: str = "/hooks") -> Iterator[Receiver]:
    """Serves `receiver` on 127.0.0.1; its URL names `url_host` (e.g. localhost)."""
    server = HTTPServer(host="127.0.0.1", port=0, threaded=True)
    server.expect_request(re.compile(".*")).respond_with_handler(receiver)
    server.start()
    receiver.url = f"http://{url_host}:{server.port}{path}"
    try:
        yield receiver
    finally:
        server.clear()
        server.stop()


class Listener:
    """A TCP listener that accepts and counts connections (and closes them at once)."""

    def __init__(self, host: str = "127.0.0.1") -> None:
        self.socket = socket.create_server((host, 0))
        self.socket.settimeout(0.2)
        self.port = self.socket.getsockname()[1]
        self.connections = 0
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._accept, daemon=True)

    def _accept(self) -> None:
        while not self._stopped.is_set():
            try:
                connection, _ = self.socket.accept()
            except (TimeoutError, OSError):
                continue
            self.connections += 1
            connection.close()

    def __enter__(self) -> Listener:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stopped.set()
        self._thread.join(timeout=2)
        self.socket.close()


def wait_until(condition: Callable[[], bool], timeout: float, interval: float = 0.1) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(interval)
    return condition()


def settings_with_callbacks(path: Path, url: str) -> Path:
    """The demo settings, with `localhost` allowed for plain http and every EUR buy and sell calling `url`
    back (the payment methods' default callback URL), so the shared flows need no change."""
    text = local_callback_settings()
    for method in ("BANK_EUR_BUY", "BANK_EUR_SELL"):
        header = f"[payment_methods.{method}]\n"
        assert header in text
        text = text.replace(header, f'{header}callback_url = "{url}"\n')
    path.write_text(text)
    return path
