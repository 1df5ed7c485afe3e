"""Which callback URLs are acceptable by what they say, and which IP addresses a callback may go to.

These are the static rules, with no I/O: the order desk applies them (with a look-up of the host's
addresses, injected as `application.ports.CallbackUrlCheck`) to a buy's or sell's `callbackUrl`, the settings
check to a payment method's `callback_url`, and the delivery worker again before each delivery, against the
addresses the host resolves to then (`projections.callbacks.urls`). The rules:

- `https` only, to a host name (or canonical IP address) whose every address is public. That is decided by
  the address, not by a list of bad ranges: it must be global unicast (`is_global`, not multicast or
  reserved, and for IPv6 inside 2000::/3, which leaves out the IPv4-compatible, -mapped and -translated
  forms, NAT64, unique- and link-local, site-local, SRv6 SIDs and multicast); a few ranges whose
  `is_global` differs between Python versions are refused on every version (`NOT_GLOBAL`: 6to4, Teredo
  and the rest of 2001::/23, 3fff::/20, 192.0.0.0/24, 192.88.99.0/24); and every IPv4 address an IPv6
  address carries (`embedded_ipv4`) must be public too. Special-use names (`localhost`, `*.internal`,
  `*.local`, ...) are refused outright.
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
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import urlsplit

from domain.errors import CallbackUrlRefused, quoted_text

MAX_URL_LENGTH = 2048
Address = ipaddress.IPv4Address | ipaddress.IPv6Address

GLOBAL_UNICAST_V6 = ipaddress.IPv6Network("2000::/3")  # every other IPv6 range is special or unassigned
# Ranges that `is_global` calls global in some Python versions (older ones such as 3.11.7, or 3.12.4 and
# newer) or in all, and that no callback has a reason to use: with them the rule is the same on every version.
NOT_GLOBAL = tuple(
    ipaddress.ip_network(network)
    for network in (
        "192.0.0.0/24",  # IETF protocol assignments (global for older versions but .0/29 and .170/31)
        "192.88.99.0/24",  # 6to4 relay anycast, deprecated (global for every version)
        "2001::/23",  # IETF protocol assignments: Teredo, ORCHID, AMT, AS112... (newer: some global)
        "2002::/16",  # 6to4, deprecated (global for older versions)
        "3fff::/20",  # documentation (global for older versions)
    )
)
# IPv6 forms whose last 32 bits are an IPv4 address (local-use NAT64 read with a /96 prefix, its usual one)
IPV4_IN_LAST_32_BITS = tuple(
    ipaddress.IPv6Network(network)
    for network in ("::/96", "::ffff:0:0/96", "::ffff:0:0:0/96", "64:ff9b::/96", "64:ff9b:1::/48")
)
SPECIAL_NAMES = ("localhost", "local", "localdomain", "internal", "intranet", "lan", "home.arpa", "arpa")
SPECIAL_NAMES += ("onion", "invalid", "test")
LABEL = re.compile(r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?")
IPV4_LIKE = re.compile(r"0x[0-9a-f]*|[0-9]+")  # a last label like this makes clients read the host as IPv4
OCTET = r"(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])"
CANONICAL_IPV4 = re.compile(rf"{OCTET}(\.{OCTET}){{3}}")


def is_public(address: Address) -> bool:
    """Whether connecting to `address` reaches the public internet and nothing of ours: a global unicast
    address, and so is every IPv4 address an IPv6 one carries (translated, NAT64, 6to4, Teredo)."""
    if isinstance(address, ipaddress.IPv4Address):
        return _is_global_unicast(address)
    return _is_global_unicast(address) and all(_is_global_unicast(ipv4) for ipv4 in embedded_ipv4(address))


def _is_global_unicast(address: Address) -> bool:
    if isinstance(address, ipaddress.IPv6Address) and (address.scope_id or address not in GLOBAL_UNICAST_V6):
        return False  # IPv4-compatible, -mapped and -translated forms, NAT64, ULA, link- and site-local...
    if not address.is_global or address.is_multicast or address.is_reserved:
        return False
    return not any(address in network for network in NOT_GLOBAL if network.version == address.version)


def embedded_ipv4(address: ipaddress.IPv6Address) -> tuple[ipaddress.IPv4Address, ...]:
    """The IPv4 addresses an IPv6 address carries, which a connection to it may reach: the IPv4-compatible
    (`::a.b.c.d`), -mapped, -translated and NAT64 forms, 6to4, and Teredo (its server and its client)."""
    if address.is_unspecified or address.is_loopback:
        return ()  # :: and ::1, not forms of 0.0.0.0 and 0.0.0.1
    if any(address in network for network in IPV4_IN_LAST_32_BITS):
        return (ipaddress.IPv4Address(address.packed[-4:]),)
    if address.sixtofour is not None:
        return (address.sixtofour,)
    return address.teredo or ()


def described(address: Address) -> str:
    """The address, and the IPv4 addresses it carries if any: `::7f00:1 (an IPv6 form of 127.0.0.1)`."""
    carried = embedded_ipv4(address) if isinstance(address, ipaddress.IPv6Address) else ()
    if not carried:
        return str(address)
    return f"{address} (an IPv6 form of {' and '.join(str(ipv4) for ipv4 in carried)})"


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


class CallbackUrlRules:
    """The static rules, with the hosts that may receive plain http (`callback_http_hosts`)."""

    def __init__(self, http_hosts: Iterable[str] = ()) -> None:
        self.http_hosts = frozenset(normalised_host(host) for host in http_hosts)

    def parse(self, url: str) -> CallbackUrl:
        """The URL's parts if it passes the static rules (no DNS); `CallbackUrlRefused` otherwise."""
        scheme, host, port = _split(url)
        address = _address(url, host)
        allow_listed = host in self.http_hosts
        if scheme != "https" and not allow_listed:
            raise refused(url, "it must use https (plain http only to hosts in callback_http_hosts)")
        if not allow_listed:
            if address is not None and not is_public(address):
                raise refused(url, f"{described(address)} is not a public address")
            if address is None and _special(host):
                raise refused(url, f"{host} is a special-use or local name, not a public host")
        return CallbackUrl(url, scheme, host, port, address, allow_listed)

    def accept(self, url: str) -> CallbackUrl:
        """The same as `parse`: these rules do no I/O (a policy that resolves host names judges their
        addresses too)."""
        return self.parse(url)


def _split(url: str) -> tuple[str, str, int]:
    """Scheme, host and port of a URL that is plainly a URL with an authority; refused otherwise."""
    if not isinstance(url, str) or not url:
        raise refused(str(url), "it is empty")
    if len(url) > MAX_URL_LENGTH:
        raise refused(url[:80] + "...", f"it is longer than {MAX_URL_LENGTH} characters")
    if not url.isascii() or any(char <= " " or char in "\x7f\\" for char in url):
        raise refused(url, "it must be ASCII without spaces, control characters or backslashes")
    try:
        parts = urlsplit(url)
    except ValueError:
        raise refused(url, "it is not a valid URL") from None
    scheme = parts.scheme.lower()
    if scheme not in ("https", "http"):
        raise refused(url, "it must use https")
    if not url[len(scheme) :].startswith("://") or not parts.netloc:
        raise refused(url, "it must name a host: https://host/path")
    if "@" in parts.netloc or "%" in parts.netloc:
        raise refused(url, "user information or percent-encoding in the host is not allowed")
    if parts.fragment or url.endswith("#"):
        raise refused(url, "a fragment (#...) is not allowed")
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
        raise refused(url, "its port is not a number from 1 to 65535")
    if not normalised_host(host):
        raise refused(url, "it must name a host: https://host/path")
    return normalised_host(host), int(port) if colon else default_port


def _address(url: str, host: str) -> Address | None:
    """The host as an IP address when it is one (only canonical forms pass), else None for a name."""
    if ":" in host:
        try:
            return ipaddress.IPv6Address(host)
        except ValueError:
            raise refused(url, f"{host} is not a valid IPv6 address") from None
    labels = host.split(".")
    if IPV4_LIKE.fullmatch(labels[-1]):
        if not CANONICAL_IPV4.fullmatch(host):
            raise refused(url, f"{host} is not an IPv4 address in dotted-decimal form (a.b.c.d)")
        return ipaddress.IPv4Address(host)
    if len(host) > 253 or not all(LABEL.fullmatch(label) for label in labels):
        raise refused(url, f"{host} is not a valid host name")
    return None


def _special(host: str) -> bool:
    if "." not in host:
        return True  # a single label only resolves through local search domains
    return any(host == name or host.endswith(f".{name}") for name in SPECIAL_NAMES)


def normalised_host(host: str) -> str:
    """Lower case, without brackets or one trailing dot: how hosts are compared."""
    host = host.strip().lower()
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return host[:-1] if host.endswith(".") and not host.endswith("..") else host


def refused(url: str, reason: str) -> CallbackUrlRefused:
    return CallbackUrlRefused(f"callbackUrl {quoted_text(url)} is refused: {reason}")
