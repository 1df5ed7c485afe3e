"""One callback request: POST to the vetted address only, follow no redirect, bounded waiting.

The connection goes to an address the URL policy has just checked (the TCP connect is pinned to it), while
the `Host` header, TLS SNI and certificate check use the URL's host name, so HTTPS works as usual and a
second DNS lookup by the HTTP client cannot lead anywhere else. Connect, write and each read wait at most
`timeout` seconds; only the status line and headers are read, the body of the answer never.
"""

from __future__ import annotations

import ssl
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache
from typing import Any

import httpcore
import httpx

from projections.callbacks.urls import ResolvedUrl


class SendFailed(Exception):
    """No HTTP answer: connection refused or reset, TLS failure, timeout."""


@dataclass(frozen=True)
class Answer:
    status: int
    address: str  # the IP address connected to


class PinnedBackend(httpcore.SyncBackend):
    """Connects to one given address, whatever host the request names."""

    def __init__(self, address: str) -> None:
        super().__init__()
        self.address = address

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.NetworkStream:
        return super().connect_tcp(
            self.address, port, timeout=timeout, local_address=local_address, socket_options=socket_options
        )


@cache
def _tls() -> ssl.SSLContext:
    return httpx.create_ssl_context()


def post(resolved: ResolvedUrl, body: bytes, headers: dict[str, str], timeout: float) -> Answer:
    """POSTs `body` to the vetted addresses of `resolved`, the next one only when a connection to the one
    before cannot be made; the first answer's status, or `SendFailed`."""
    failure = SendFailed("no address to connect to")
    for address in resolved.addresses:
        try:
            return _post_to(str(address), resolved, body, headers, timeout)
        except _NotConnected as error:
            failure = SendFailed(str(error))
    raise failure


class _NotConnected(Exception):
    pass


def _post_to(
    address: str, resolved: ResolvedUrl, body: bytes, headers: dict[str, str], timeout: float
) -> Answer:
    url = resolved.url
    target = httpcore.URL(
        scheme=url.scheme.encode(), host=url.host.encode(), port=url.port, target=url.target.encode()
    )
    sent = [("Host", url.authority), *headers.items(), ("Content-Length", str(len(body)))]
    limits = {"connect": timeout, "read": timeout, "write": timeout, "pool": timeout}
    with httpcore.ConnectionPool(
        ssl_context=_tls(), network_backend=PinnedBackend(address), max_connections=1, retries=0
    ) as pool:
        try:
            with pool.stream(
                "POST", target, headers=sent, content=body, extensions={"timeout": limits}
            ) as answer:
                return Answer(answer.status, address)
        except httpcore.ConnectError as error:
            raise _NotConnected(f"{address}: {type(error).__name__}: {error}"[:300]) from None
        except httpcore.TimeoutException as error:
            raise SendFailed(f"no answer within {timeout:g} s ({type(error).__name__})") from None
        except (
            httpcore.NetworkError,
            httpcore.ProtocolError,
            httpcore.UnsupportedProtocol,
            OSError,
        ) as error:
            raise SendFailed(f"{type(error).__name__}: {error}"[:300]) from None
