"""Which callback URLs are accepted, and which address a callback may connect to (the SSRF defence).

A URL is checked when it is given (a buy's or sell's `callbackUrl`, a payment method's `callback_url` in the
settings) and again just before each delivery, against the addresses its host resolves to then; the delivery
connects to one of exactly those addresses (see `sender`), so a DNS answer that changes between the check
and the connection cannot point it elsewhere. The rules:

- `https` only, to a host name (or canonical IP address) whose every address is public: not loopback,
  private, link-local, carrier-grade NAT, documentation, multicast, reserved, IPv4-mapped or -translated
  IPv6, 6to4 or Teredo. Special-use names (`localhost`, `*.internal`, `*.local`, ...) are refused outright.
- No user information (`user:pass@`), no fragment, no percent-encoding, spaces, control characters or
  backslashes, ASCII only (IDN hosts in their `xn--` form).
- IPv4 addresses only as four decimal numbers without leading zeros: decimal (`2130706433`), octal
  (`0177.0.0.1`), hexadecimal (`0x7f.1`) and short (`127.1`) forms are refused, since HTTP clients and
  resolvers disagree about what they mean.
- A host named in `callback_http_hosts` of the settings (a local receiver) may use `http` too, and is not
  held to the public-address rule.
"""

from __future__ import annotations

import ipaddress
import re
import socket
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from urllib.parse import urlsplit

from domain.errors import CallbackUrlRefused

MAX_URL_LENGTH = 2048
Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Resolver = Callable[[str, int], Sequence[str]]  # host, port -> addresses; OSError when it does not resolve

NOT_PUBLIC = tuple(
    ipaddress.ip_network(network)
    for network in (
        "0.0.0.0/8",
        "10.0.0.0/8",
        "100.64.0.0/10",  # carrier-grade NAT
        "127.0.0.0/8",
        "169.254.0.0/16",
        "172.16.0.0/12",
        "192.0.0.0/24",
        "192.0.2.0/24",
        "192.88.99.0/24",
        "192.168.0.0/16",
        "198.18.0.0/15",
        "198.51.100.0/24",
        "203.0.113.0/24",
        "224.0.0.0/4",
        "240.0.0.0/4",
        "::/128",
        "::1/128",
        "::ffff:0:0/96",  # IPv4-mapped
        "64:ff9b::/96",  # NAT64, an IPv4 address inside
        "64:ff9b:1::/48",
        "100::/64",
        "2001::/23",  # Teredo and other special-purpose blocks
        "2001:db8::/32",
        "2002::/16",  # 6to4, an IPv4 address inside
        "fc00::/7",
        "fe80::/10",
        "ff00::/8",
    )
)
SPECIAL_NAMES = ("localhost", "local", "localdomain", "internal", "intranet", "lan", "home.arpa", "arpa")
SPECIAL_NAMES += ("onion", "invalid", "test")
LABEL = re.compile(r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?")
IPV4_LIKE = re.compile(r"0x[0-9a-f]*|[0-9]+")  # a last label like this makes clients read the host as IPv4
OCTET = r"(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])"
CANONICAL_IPV4 = re.compile(rf"{OCTET}(\.{OCTET}){{3}}")


def is_public(address: Address) -> bool:
    """Whether connecting to `address` reaches the public internet and nothing of ours."""
    if isinstance(address, ipaddress.IPv6Address) and (address.ipv4_mapped or address.scope_id):
        return False
    if not address.is_global or address.is_multicast:
        return False
    return not any(address in network for network in NOT_PUBLIC if network.version == address.version)


@dataclass(frozen=True)
class CallbackUrl:
    """A callback URL that passed the static rules: its parts, normalised."""

    url: str
    scheme: str  # "https", or "http" for an allow-listed host
    host: str  # lower case, without brackets or a trailing dot
    port: int
    address: Address | None  # the host, when it is an IP address
    allow_listed: bool  # the host is in `callback_http_hosts`

    @property
    def target(self) -> str:
        """Path and query, as sent in the request line."""
        parts = urlsplit(self.url)
        return (parts.path or "/") + (f"?{parts.query}" if parts.query else "")

    @property
    def authority(self) -> str:
        """The Host header: the host (an IPv6 address in brackets) and a port other than the default."""
        host = f"[{self.host}]" if isinstance(self.address, ipaddress.IPv6Address) else self.host
        default = 443 if self.scheme == "https" else 80
        return host if self.port == default else f"{host}:{self.port}"


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
    def __init__(self, http_hosts: Iterable[str] = (), resolver: Resolver | None = None) -> None:
        self.http_hosts = frozenset(_normalised_host(host) for host in http_hosts)
        self.resolver = resolver or SystemResolver()

    def accept(self, url: str) -> CallbackUrl:
        """The URL, if it passes the static rules and its host resolves to acceptable addresses only."""
        return self.resolve(url).url

    def resolve(self, url: str) -> ResolvedUrl:
        """The URL and the addresses a delivery may connect to now; `CallbackUrlRefused` otherwise."""
        parsed = self.parse(url)
        if parsed.address is not None:
            return ResolvedUrl(parsed, (parsed.address,))
        try:
            answers = self.resolver(parsed.host, parsed.port)
            addresses = tuple(ipaddress.ip_address(answer) for answer in answers)
        except (OSError, UnicodeError, ValueError) as error:
            raise _refused(url, f"its host {parsed.host} does not resolve ({error})") from None
        if not addresses:
            raise _refused(url, f"its host {parsed.host} does not resolve")
        if not parsed.allow_listed:
            for address in addresses:
                if not is_public(address):
                    raise _refused(
                        url, f"its host {parsed.host} resolves to the non-public address {address}"
                    )
        return ResolvedUrl(parsed, addresses)

    def parse(self, url: str) -> CallbackUrl:
        """The static rules only (no DNS): what the settings check applies to payment methods' URLs."""
        scheme, host, port = _split(url)
        address = _address(url, host)
        allow_listed = host in self.http_hosts
        if scheme != "https" and not allow_listed:
            raise _refused(url, "it must use https (plain http only to hosts in callback_http_hosts)")
        if not allow_listed:
            if address is not None and not is_public(address):
                raise _refused(url, f"{address} is not a public address")
            if address is None and _special(host):
                raise _refused(url, f"{host} is a special-use or local name, not a public host")
        return CallbackUrl(url, scheme, host, port, address, allow_listed)


def _split(url: str) -> tuple[str, str, int]:
    """Scheme, host and port of a URL that is plainly a URL with an authority; refused otherwise."""
    if not isinstance(url, str) or not url:
        raise _refused(str(url), "it is empty")
    if len(url) > MAX_URL_LENGTH:
        raise _refused(url[:80] + "...", f"it is longer than {MAX_URL_LENGTH} characters")
    if not url.isascii() or any(char <= " " or char in "\x7f\\" for char in url):
        raise _refused(url, "it must be ASCII without spaces, control characters or backslashes")
    try:
        parts = urlsplit(url)
    except ValueError:
        raise _refused(url, "it is not a valid URL") from None
    scheme = parts.scheme.lower()
    if scheme not in ("https", "http"):
        raise _refused(url, "it must use https")
    if not url[len(scheme) :].startswith("://") or not parts.netloc:
        raise _refused(url, "it must name a host: https://host/path")
    if "@" in parts.netloc or "%" in parts.netloc:
        raise _refused(url, "user information or percent-encoding in the host is not allowed")
    if parts.fragment or url.endswith("#"):
        raise _refused(url, "a fragment (#...) is not allowed")
    host, port = _host_and_port(url, parts.netloc, 443 if scheme == "https" else 80)
    return scheme, host, port


def _host_and_port(url: str, netloc: str, default_port: int) -> tuple[str, int]:
    bracketed = netloc.startswith("[")
    host, colon, port = netloc.rpartition("]" if bracketed else ":")
    if bracketed:
        host, colon, port = host[1:], ":" if port else "", port[1:]
    elif not colon:
        host = port
    if colon and (not port.isdigit() or not 1 <= int(port) <= 65535):
        raise _refused(url, "its port is not a number from 1 to 65535")
    if not _normalised_host(host):
        raise _refused(url, "it must name a host: https://host/path")
    return _normalised_host(host), int(port) if colon else default_port


def _address(url: str, host: str) -> Address | None:
    """The host as an IP address when it is one (only canonical forms pass), else None for a name."""
    if ":" in host:
        try:
            return ipaddress.IPv6Address(host)
        except ValueError:
            raise _refused(url, f"{host} is not a valid IPv6 address") from None
    labels = host.split(".")
    if IPV4_LIKE.fullmatch(labels[-1]):
        if not CANONICAL_IPV4.fullmatch(host):
            raise _refused(url, f"{host} is not an IPv4 address in dotted-decimal form (a.b.c.d)")
        return ipaddress.IPv4Address(host)
    if len(host) > 253 or not all(LABEL.fullmatch(label) for label in labels):
        raise _refused(url, f"{host} is not a valid host name")
    return None


def _special(host: str) -> bool:
    if "." not in host:
        return True  # a single label only resolves through local search domains
    return any(host == name or host.endswith(f".{name}") for name in SPECIAL_NAMES)


def _normalised_host(host: str) -> str:
    host = host.strip().lower()
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return host[:-1] if host.endswith(".") and not host.endswith("..") else host


def _refused(url: str, reason: str) -> CallbackUrlRefused:
    return CallbackUrlRefused(f"callbackUrl {url!r} is refused: {reason}")
