"""Where exactly a callback may connect: the host's addresses now, each judged by the static rules.

The static rules (scheme, host, which addresses are public) are `domain.callback_urls`. A URL is checked
when it is given (a buy's or sell's `callbackUrl`: the order desk gets this policy through the port
`application.ports.CallbackUrlCheck`) and again just before each delivery, against the addresses its host
resolves to then; the delivery connects to one of exactly those addresses (see `sender`), so a DNS answer
that changes between the check and the connection cannot point it elsewhere.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass

from domain.callback_urls import Address, CallbackUrl, CallbackUrlRules, described, is_public, refused

Resolver = Callable[[str, int], Sequence[str]]  # host, port -> addresses; OSError when it does not resolve


@dataclass(frozen=True)
class ResolvedUrl:
    """A callback URL and the vetted addresses to connect to, in the resolver's order."""

    url: CallbackUrl
    addresses: tuple[Address, ...]


class SystemResolver:
    """`getaddrinfo`, bounded by a timeout (the lookup runs on a small pool of its own)."""

    _pool = ThreadPoolExecutor(max_workers=8, thread_name_prefix="callback-dns")

    def __init__(self, timeout_seconds: float = 5.0) -> None:
        self.timeout = timeout_seconds

    def __call__(self, host: str, port: int) -> list[str]:
        future = self._pool.submit(socket.getaddrinfo, host, port, type=socket.SOCK_STREAM)
        try:
            infos = future.result(timeout=self.timeout)
        except FutureTimeout:
            raise OSError(f"no DNS answer within {self.timeout:g} s") from None
        return list(dict.fromkeys(str(info[4][0]) for info in infos))


class CallbackUrlPolicy:
    """The static rules and the addresses a host name resolves to (`application.ports.CallbackUrlCheck`)."""

    def __init__(self, http_hosts: Iterable[str] = (), resolver: Resolver | None = None) -> None:
        self.rules = CallbackUrlRules(http_hosts)
        self.resolver = resolver or SystemResolver()

    def parse(self, url: str) -> CallbackUrl:
        """The static rules only (no DNS)."""
        return self.rules.parse(url)

    def accept(self, url: str) -> CallbackUrl:
        """The URL, if it passes the static rules and its host resolves to acceptable addresses only."""
        return self.resolve(url).url

    def resolve(self, url: str) -> ResolvedUrl:
        """The URL and the addresses a delivery may connect to now; `CallbackUrlRefused` otherwise."""
        parsed = self.rules.parse(url)
        if parsed.address is not None:
            return ResolvedUrl(parsed, (parsed.address,))
        try:
            answers = self.resolver(parsed.host, parsed.port)
            addresses = tuple(ipaddress.ip_address(answer) for answer in answers)
        except (OSError, UnicodeError, ValueError) as error:
            raise refused(url, f"its host {parsed.host} does not resolve ({error})") from None
        if not addresses:
            raise refused(url, f"its host {parsed.host} does not resolve")
        if not parsed.allow_listed:
            for address in addresses:
                if not is_public(address):
                    raise refused(
                        url,
                        f"its host {parsed.host} resolves to the non-public address {described(address)}",
                    )
        return ResolvedUrl(parsed, addresses)
