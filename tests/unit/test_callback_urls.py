"""The callback URL policy: a corpus of hostile URLs is refused, good ones pass, and the check at send time
looks at the addresses the host resolves to then (a fake resolver stands in for DNS)."""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence

import msgspec
import pytest

from application.settings import (
    DEFAULT_SETTINGS,
    PaymentMethod,
    Settings,
    consistency_problems,
    load_settings,
)
from domain.callback_urls import embedded_ipv4, is_public
from domain.errors import CallbackUrlRefused
from projections.callbacks.urls import CallbackUrlPolicy

PUBLIC_V4 = "93.184.215.14"
PUBLIC_V6 = "2606:4700:4700::1111"
DNS = {
    "hooks.partner.example": [PUBLIC_V4, PUBLIC_V6],
    "rebind.partner.example": ["127.0.0.1"],
    "private.partner.example": ["10.1.2.3"],
    "cgnat.partner.example": ["100.100.0.7"],
    "linklocal.partner.example": ["169.254.169.254"],
    "mapped.partner.example": ["::ffff:10.0.0.1"],
    "mixed.partner.example": [PUBLIC_V4, "192.168.0.10"],
    "metadata.google.internal": ["169.254.169.254"],
    "127.0.0.1.nip.io": ["127.0.0.1"],
    "localhost": ["127.0.0.1", "::1"],
}
# issue 11, item 5: IPv6 addresses that carry a private IPv4 address or lie in a non-global range
NON_GLOBAL_IPV6 = [
    "::7f00:1",  # IPv4-compatible 127.0.0.1
    "::127.0.0.1",
    "::ffff:0:7f00:1",  # IPv4-translated 127.0.0.1
    "::a9fe:a9fe",  # IPv4-compatible 169.254.169.254, the cloud metadata service
    "fec0::1",  # site-local, deprecated
    "3fff::1",  # documentation
    "5f00::1",  # SRv6 SIDs
]
DNS |= {f"v6-{index}.partner.example": [address] for index, address in enumerate(NON_GLOBAL_IPV6)}


class FakeResolver:
    def __init__(self, answers: dict[str, list[str]]) -> None:
        self.answers = answers
        self.asked: list[tuple[str, int]] = []

    def __call__(self, host: str, port: int) -> Sequence[str]:
        self.asked.append((host, port))
        if host not in self.answers:
            raise OSError("Name or service not known")
        return self.answers[host]


HOSTILE = [
    "http://hooks.partner.example/cb",  # plain http to a host not allow-listed
    "ftp://hooks.partner.example/cb",
    "file:///etc/passwd",
    "gopher://127.0.0.1:6379/_INFO",
    "javascript:alert(1)",
    "data:text/plain,hello",
    "//hooks.partner.example/cb",
    "https:hooks.partner.example/cb",
    "https:/hooks.partner.example/cb",
    "https:///cb",
    "",
    "https://127.0.0.1/cb",
    "https://127.0.0.1:8443/cb",
    "https://localhost/cb",
    "https://LOCALHOST./cb",
    "https://foo.localhost/cb",
    "https://intranet/cb",
    "https://metadata.google.internal/computeMetadata/v1/",
    "https://printer.local/cb",
    "https://10.0.0.1/cb",
    "https://172.16.5.4/cb",
    "https://192.168.1.1/cb",
    "https://169.254.169.254/latest/meta-data/",
    "https://100.64.0.1/cb",  # carrier-grade NAT
    "https://0.0.0.0/cb",
    "https://224.0.0.1/cb",
    "https://255.255.255.255/cb",
    "https://192.0.2.10/cb",
    "https://198.18.0.1/cb",
    "https://[::1]/cb",
    "https://[::]/cb",
    "https://[::ffff:127.0.0.1]/cb",  # IPv4-mapped IPv6
    "https://[::ffff:7f00:1]/cb",
    "https://[64:ff9b::7f00:1]/cb",  # NAT64 of 127.0.0.1
    "https://[2002:7f00:1::1]/cb",  # 6to4 of 127.0.0.1
    "https://[fe80::1]/cb",
    "https://[fe80::1%25eth0]/cb",
    "https://[fc00::1]/cb",
    "https://2130706433/cb",  # decimal 127.0.0.1
    "https://017700000001/cb",  # octal 127.0.0.1
    "https://0177.0.0.1/cb",
    "https://0x7f.0.0.1/cb",
    "https://0x7f000001/cb",
    "https://127.1/cb",  # short form
    "https://127.0.1/cb",
    "https://127.000.000.001/cb",
    "https://1.2.3.4.5/cb",
    "https://0/cb",
    "https://user:secret@hooks.partner.example/cb",
    "https://hooks.partner.example@127.0.0.1/cb",
    "https://hooks.partner.example\\@127.0.0.1/cb",
    "https://hooks.partner.example:0/cb",
    "https://hooks.partner.example:99999/cb",
    "https://hooks.partner.example:+443/cb",
    "https://hooks.partner.example/cb#fragment",
    "https://hooks.partner.example/c b",
    "https://hooks.partner.example/cb\r\nX-Injected: 1",
    "https://h%6foks.partner.example/cb",
    "https://hooks.partner.éxample/cb",
    "https://[::1/cb",
    "https://rebind.partner.example/cb",  # resolves to loopback
    "https://private.partner.example/cb",
    "https://cgnat.partner.example/cb",
    "https://linklocal.partner.example/cb",
    "https://mapped.partner.example/cb",
    "https://mixed.partner.example/cb",  # one public and one private address
    "https://127.0.0.1.nip.io/cb",
    "https://unknown.partner.example/cb",  # does not resolve
    "https://hooks.partner.example/" + "x" * 2100,
    *(f"https://[{address}]/cb" for address in NON_GLOBAL_IPV6),
    *(f"https://v6-{index}.partner.example/cb" for index in range(len(NON_GLOBAL_IPV6))),
]

GOOD = [
    ("https://hooks.partner.example/cb", "hooks.partner.example", 443, "/cb"),
    ("https://Hooks.Partner.Example:8443/cb?tenant=7", "hooks.partner.example", 8443, "/cb?tenant=7"),
    ("https://hooks.partner.example./cb", "hooks.partner.example", 443, "/cb"),
    ("https://hooks.partner.example", "hooks.partner.example", 443, "/"),
    (f"https://{PUBLIC_V4}/cb", PUBLIC_V4, 443, "/cb"),
    (f"https://[{PUBLIC_V6}]:9443/cb", PUBLIC_V6, 9443, "/cb"),
]


@pytest.fixture
def policy() -> CallbackUrlPolicy:
    return CallbackUrlPolicy(http_hosts=(), resolver=FakeResolver(DNS))


def test_the_hostile_corpus_is_large_enough() -> None:
    assert len(HOSTILE) >= 40
    assert len(set(HOSTILE)) == len(HOSTILE)


@pytest.mark.parametrize("url", HOSTILE)
def test_a_hostile_callback_url_is_refused(policy: CallbackUrlPolicy, url: str) -> None:
    with pytest.raises(CallbackUrlRefused) as refused:
        policy.accept(url)
    assert refused.value.code == "callback_url_refused"
    assert "is refused" in refused.value.detail


@pytest.mark.parametrize("url", HOSTILE)
def test_a_hostile_url_is_refused_even_with_another_host_allow_listed(url: str) -> None:
    policy = CallbackUrlPolicy(http_hosts=["receiver.partner.example"], resolver=FakeResolver(DNS))
    with pytest.raises(CallbackUrlRefused):
        policy.accept(url)


@pytest.mark.parametrize(("url", "host", "port", "target"), GOOD)
def test_a_public_https_url_is_accepted(
    policy: CallbackUrlPolicy, url: str, host: str, port: int, target: str
) -> None:
    accepted = policy.accept(url)
    assert (accepted.url, accepted.scheme, accepted.host, accepted.port) == (url, "https", host, port)
    assert accepted.target == target
    assert not accepted.allow_listed


def test_the_addresses_to_connect_to_are_the_vetted_ones(policy: CallbackUrlPolicy) -> None:
    resolved = policy.resolve("https://hooks.partner.example:8443/cb")
    assert [str(address) for address in resolved.addresses] == [PUBLIC_V4, PUBLIC_V6]
    assert resolved.url.authority == "hooks.partner.example:8443"
    assert policy.resolve(f"https://[{PUBLIC_V6}]/cb").url.authority == f"[{PUBLIC_V6}]"


def test_an_ip_address_host_is_not_looked_up() -> None:
    resolver = FakeResolver(DNS)
    CallbackUrlPolicy(resolver=resolver).resolve(f"https://{PUBLIC_V4}/cb")
    assert resolver.asked == []


def test_a_host_that_resolves_elsewhere_at_send_time_is_refused_then() -> None:
    """DNS rebinding: public when the URL is given, loopback when the callback is sent."""
    answers = {"flip.partner.example": [PUBLIC_V4]}
    policy = CallbackUrlPolicy(resolver=FakeResolver(answers))
    assert policy.accept("https://flip.partner.example/cb").host == "flip.partner.example"
    answers["flip.partner.example"] = ["127.0.0.1"]
    with pytest.raises(CallbackUrlRefused, match=r"non-public address 127\.0\.0\.1"):
        policy.resolve("https://flip.partner.example/cb")


def test_an_allow_listed_host_may_use_http_and_local_addresses() -> None:
    policy = CallbackUrlPolicy(http_hosts=["localhost", "127.0.0.1", "[::1]"], resolver=FakeResolver(DNS))
    local = policy.resolve("http://localhost:8080/hooks")
    assert local.url.allow_listed and local.url.scheme == "http" and local.url.port == 8080
    assert [str(address) for address in local.addresses] == ["127.0.0.1", "::1"]
    assert policy.accept("http://127.0.0.1:9000/cb").address == ipaddress.ip_address("127.0.0.1")
    assert policy.accept("https://[::1]:9000/cb").allow_listed
    assert policy.accept("http://LocalHost.:8080/cb").host == "localhost"


def test_an_allow_listed_ip_is_still_only_accepted_in_its_canonical_form() -> None:
    policy = CallbackUrlPolicy(http_hosts=["127.0.0.1"], resolver=FakeResolver(DNS))
    for url in ("http://2130706433/cb", "http://127.1/cb", "http://0x7f.0.0.1/cb", "http://[::ffff:7f00:1]/"):
        with pytest.raises(CallbackUrlRefused):
            policy.accept(url)


def test_a_slow_or_failing_resolver_refuses_the_url() -> None:
    def failing(host: str, port: int) -> Sequence[str]:
        raise OSError("no DNS answer within 5 s")

    with pytest.raises(CallbackUrlRefused, match="does not resolve"):
        CallbackUrlPolicy(resolver=failing).accept("https://hooks.partner.example/cb")


@pytest.mark.parametrize(
    ("address", "public"),
    [
        (PUBLIC_V4, True),
        (PUBLIC_V6, True),
        ("8.8.8.8", True),
        ("2001:4860:4860::8888", True),
        ("2a00:1450:4001:80b::200e", True),
        ("100.63.255.255", True),
        ("100.64.0.0", False),  # shared address space (carrier-grade NAT)
        ("100.127.255.255", False),
        ("127.255.0.1", False),
        ("172.31.255.255", False),
        ("0.1.2.3", False),
        ("192.0.0.1", False),
        ("198.18.0.1", False),
        ("198.19.255.255", False),
        ("192.88.99.1", False),  # 6to4 relay anycast
        ("224.0.0.1", False),
        ("239.255.255.250", False),
        ("240.0.0.1", False),
        ("255.255.255.255", False),
        ("::ffff:8.8.8.8", False),
        ("64:ff9b::808:808", False),
        ("64:ff9b:1::808:808", False),
        ("2001:db8::1", False),
        ("ff02::1", False),
        ("ff0e::1", False),  # global-scope multicast
        ("fc00::1", False),
        ("fd12:3456:789a::1", False),
        ("fe80::1", False),
        ("fe80::1%eth0", False),
        ("100::1", False),  # discard
        ("2001:10::1", False),  # ORCHID
        ("2001:2::1", False),  # benchmarking
        ("4000::1", False),  # unassigned, outside 2000::/3
    ],
)
def test_which_addresses_are_public(address: str, public: bool) -> None:
    assert is_public(ipaddress.ip_address(address)) is public


@pytest.mark.parametrize("address", NON_GLOBAL_IPV6)
def test_an_ipv6_address_outside_the_global_unicast_space_is_not_public(address: str) -> None:
    assert not is_public(ipaddress.ip_address(address))


@pytest.mark.parametrize(
    "address",
    [
        "::8.8.8.8",  # IPv4-compatible addresses are deprecated, whatever IPv4 address they carry
        "::ffff:0:808:808",  # IPv4-translated
        "2002:808:808::1",  # 6to4, deprecated
        "2001:0:808:808::f7f7:f7f7",  # Teredo, server 8.8.8.8 and client 8.8.8.8
    ],
)
def test_an_ipv6_form_of_a_public_ipv4_address_is_not_public_either(address: str) -> None:
    assert not is_public(ipaddress.ip_address(address))


@pytest.mark.parametrize(
    "address",
    [
        "192.0.0.9",  # newer Python versions (3.12.4 and up) call these global, older ones do not
        "192.0.0.10",
        "2001:1::1",
        "2001:3::1",
        "2001:4:112::1",
        "2001:20::1",  # ORCHIDv2
        "2001:30::1",
        "2002:808:808::1",  # older versions (this 3.11.7) call 6to4 global, newer ones do not
        "3fff::1",  # documentation, global for older versions
    ],
)
def test_an_address_whose_is_global_depends_on_the_python_version_is_not_public(address: str) -> None:
    assert not is_public(ipaddress.ip_address(address))


@pytest.mark.parametrize(
    ("address", "carried"),
    [
        ("::7f00:1", ["127.0.0.1"]),  # IPv4-compatible
        ("::a9fe:a9fe", ["169.254.169.254"]),
        ("::ffff:10.0.0.1", ["10.0.0.1"]),  # IPv4-mapped
        ("::ffff:0:7f00:1", ["127.0.0.1"]),  # IPv4-translated
        ("64:ff9b::a00:1", ["10.0.0.1"]),  # NAT64
        ("64:ff9b:1::c0a8:1", ["192.168.0.1"]),  # local-use NAT64
        ("2002:7f00:1::1", ["127.0.0.1"]),  # 6to4
        ("2001:0:4136:e378:8000:63bf:3fff:fdd2", ["65.54.227.120", "192.0.2.45"]),  # Teredo server, client
        ("::1", []),
        ("::", []),
        (PUBLIC_V6, []),
    ],
)
def test_the_ipv4_addresses_an_ipv6_address_carries(address: str, carried: list[str]) -> None:
    assert [str(ipv4) for ipv4 in embedded_ipv4(ipaddress.IPv6Address(address))] == carried


@pytest.mark.parametrize(
    ("address", "carried"),
    [("2001:0:808:808::3f57:fefe", "192.168.1.1"), ("2001:0:a00:1::f7f7:f7f7", "10.0.0.1")],
)
def test_a_teredo_address_is_judged_by_its_server_and_by_its_client(address: str, carried: str) -> None:
    teredo = ipaddress.IPv6Address(address)
    assert carried in [str(ipv4) for ipv4 in embedded_ipv4(teredo)]
    assert not is_public(teredo)


def test_the_refusal_names_the_ipv4_address_an_ipv6_address_carries(policy: CallbackUrlPolicy) -> None:
    with pytest.raises(
        CallbackUrlRefused, match=r"::7f00:1 \(an IPv6 form of 127\.0\.0\.1\) is not a public"
    ):
        policy.accept("https://[::7f00:1]/hook")
    with pytest.raises(
        CallbackUrlRefused, match=r"non-public address ::a9fe:a9fe \(an IPv6 form of 169\.254"
    ):
        policy.accept(f"https://v6-{NON_GLOBAL_IPV6.index('::a9fe:a9fe')}.partner.example/hook")


def with_method(settings: Settings, code: str, **changes: object) -> Settings:
    method = settings.payment_methods.get(code) or PaymentMethod(direction="buy", currency="EUR")
    methods = {**settings.payment_methods, code: msgspec.structs.replace(method, **changes)}
    return msgspec.structs.replace(settings, payment_methods=methods)


def test_a_payment_methods_callback_url_is_checked_with_the_settings() -> None:
    bad = with_method(
        load_settings(DEFAULT_SETTINGS), "BANK_EUR_BUY", callback_url="http://169.254.169.254/x"
    )
    problems = consistency_problems(bad)
    assert [p for p in problems if p.startswith("payment_methods.BANK_EUR_BUY.callback_url: ")], problems
    allowed = msgspec.structs.replace(bad, callback_http_hosts=["169.254.169.254"])
    assert consistency_problems(allowed) == []


def test_a_payment_methods_url_is_not_looked_up_when_the_settings_load() -> None:
    """Loading settings does no DNS: a name that does not resolve here is only checked when sending."""
    hooked = with_method(
        load_settings(DEFAULT_SETTINGS), "HOOKED", callback_url="https://nx.partner.example/"
    )
    assert consistency_problems(hooked) == []
