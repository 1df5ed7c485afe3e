"""The HTTP server's limit on a request's head: the request line and the headers together may hold at most
HEAD_LIMIT bytes (names and values as received). Over it, uvicorn answers as it does to every request it
cannot parse: 400 with a plain-text `Invalid HTTP request received.` and `Connection: close` (docs/api.md,
"What a request must be"), before the application sees anything.

uvicorn's h11 protocol has such a limit (`h11_max_incomplete_event_size`); its httptools protocol, the one
`serve` runs, has none, so this subclass counts the URL and header bytes the parser hands over and refuses
past the limit. A head that never completes is cut off too once the bytes received for it pass a few times
the limit, so a client cannot make the server hold an endless header in memory.
"""

from __future__ import annotations

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

HEAD_LIMIT = 32 * 1024
UNFINISHED_HEAD_LIMIT = 4 * HEAD_LIMIT  # received without the head completing (what the parser buffers)
PROTOCOL = "interface.http_limits:HeadLimitedHttpToolsProtocol"  # uvicorn's `http` option


class HeadTooLarge(Exception):
    pass


class HeadLimitedHttpToolsProtocol(HttpToolsProtocol):
    head_bytes = 0
    received_in_head = 0
    in_head = True

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self.head_bytes = 0
        self.received_in_head = 0
        self.in_head = True

    def on_url(self, url: bytes) -> None:
        self._count(len(url))
        super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        self._count(len(name) + len(value) + 4)  # ": " and CRLF
        super().on_header(name, value)

    def on_headers_complete(self) -> None:
        self.in_head = False
        super().on_headers_complete()

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
