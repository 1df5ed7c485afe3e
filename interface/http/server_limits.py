"""The HTTP server's limits on a request's head and on the time a request may take to arrive.

Size: the request line and the headers together may hold at most HEAD_LIMIT bytes (names and values as
received). Over it, uvicorn answers as it does to every request it cannot parse: 400 with a plain-text
`Invalid HTTP request received.` and `Connection: close` (docs/api.md, "What a request must be"), before the
application sees anything. uvicorn's h11 protocol has such a limit (`h11_max_incomplete_event_size`); its
httptools protocol, the one `serve` runs, has none, so this subclass counts the URL and header bytes the
parser hands over and refuses past the limit. A head that never completes is cut off too once the bytes
received for it pass a few times the limit, so a client cannot make the server hold an endless header in
memory.

Time: uvicorn bounds only the wait between two requests of a connection (`timeout_keep_alive`); a client
that sends its head or its body a byte at a time (slowloris), or opens a connection and sends nothing, would
hold the connection for ever. So the head must have come `head_seconds` after the connection opened (for a
connection's first request) or after its first byte (for the next ones), and the body `body_seconds` after
the head (the settings' `[http]`). A late request is answered 408 `request_timeout` (problem+json) with
`Connection: close`; the application, if it already waits for the body, sees the client gone, and whatever it
answers is dropped. A connection that sent nothing is closed without an answer, as uvicorn closes an idle
keep-alive connection. Bodies are at most 64 KiB (`interface.idempotency.keys.MAX_BODY`), below uvicorn's
high-water mark, so the server never stops reading a body the application is waiting for.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from typing import Any

import msgspec
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol

from interface.http.request_ids import new_request_id
from interface.http.shapes import Problem

HEAD_LIMIT = 32 * 1024
UNFINISHED_HEAD_LIMIT = 4 * HEAD_LIMIT  # received without the head completing (what the parser buffers)
LATE = "request_timeout"


class HeadTooLarge(Exception):
    pass


def limited_protocol(head_seconds: float, body_seconds: float) -> Callable[..., asyncio.Protocol]:
    """uvicorn's `http` option: the protocol with these time limits (a partial, which uvicorn's worker
    processes get pickled)."""
    return functools.partial(LimitedHttpToolsProtocol, head_seconds=head_seconds, body_seconds=body_seconds)


class LimitedHttpToolsProtocol(HttpToolsProtocol):
    head_bytes = 0
    received_in_head = 0
    in_head = True

    def __init__(
        self,
        *args: Any,
        head_seconds: float,
        body_seconds: float,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.head_seconds = head_seconds
        self.body_seconds = body_seconds
        self._deadline: asyncio.TimerHandle | None = None
        self._begun = False  # the first bytes of a request have come, and not yet its end

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm(self.head_seconds, self._head_late)

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self.head_bytes = 0
        self.received_in_head = 0
        self.in_head = True
        self._begun = True
        if self._deadline is None:  # a later request of the connection: from its first byte
            self._arm(self.head_seconds, self._head_late)

    def on_url(self, url: bytes) -> None:
        self._count(len(url))
        super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        self._count(len(name) + len(value) + 4)  # ": " and CRLF
        super().on_header(name, value)

    def on_headers_complete(self) -> None:
        self.in_head = False
        self._disarm()
        super().on_headers_complete()
        if not (self.parser.should_upgrade() and self._should_upgrade()):  # an upgrade is no longer HTTP's
            self._arm(self.body_seconds, self._body_late)

    def on_message_complete(self) -> None:
        self._disarm()
        self._begun = False
        super().on_message_complete()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)  # a parser error (HeadTooLarge in a callback among them) answers 400
        if self.in_head and not self.transport.is_closing():
            self.received_in_head += len(data)
            if self.received_in_head > UNFINISHED_HEAD_LIMIT:
                self.send_400_response("Invalid HTTP request received.")

    def _count(self, size: int) -> None:
        self.head_bytes += size
        if self.head_bytes > HEAD_LIMIT:
            raise HeadTooLarge(f"the request line and headers exceed {HEAD_LIMIT} bytes")

    def _arm(self, seconds: float, late: Callable[[], None]) -> None:
        self._disarm()
        self._deadline = self.loop.call_later(seconds, late)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _head_late(self) -> None:
        self._deadline = None
        if self.transport.is_closing():
            return
        if not self._begun:  # nothing of a request came: closed as an idle keep-alive connection is
            self.transport.close()
            return
        self._refuse_late(f"the request line and headers did not arrive within {self.head_seconds:g} s")

    def _body_late(self) -> None:
        self._deadline = None
        cycle = self.cycle
        if self.transport.is_closing():
            return
        if cycle is None or cycle.response_started:  # answered already (refused before its body, say)
            self.transport.close()
            return
        # the application's receive() now tells it that the client is gone, and its answer is dropped
        cycle.disconnected = True
        cycle.message_event.set()
        self._refuse_late(f"the request body did not arrive within {self.body_seconds:g} s")

    def _refuse_late(self, detail: str) -> None:
        """Answers 408 `request_timeout` as problem+json, under a request id of its own (the application may
        never have seen the request), and closes the connection."""
        request_id = new_request_id()
        self.logger.warning("%s from %s; answered 408 (request %s)", detail, self.client, request_id)
        problem = Problem(
            type=f"urn:broker-ledger:problem:{LATE}",
            title="Request timeout",
            status=408,
            detail=detail,
            code=LATE,
            errors=[detail],
            request_id=request_id,
        )
        body = msgspec.json.encode(problem)
        head = [STATUS_LINE[408]]
        for name, value in self.server_state.default_headers:
            head += [name, b": ", value, b"\r\n"]
        head += [
            b"content-type: application/problem+json\r\n",
            b"x-request-id: %s\r\n" % request_id.encode("ascii"),
            b"content-length: %d\r\n" % len(body),
            b"connection: close\r\n\r\n",
        ]
        self.transport.write(b"".join(head) + body)
        self.transport.close()
