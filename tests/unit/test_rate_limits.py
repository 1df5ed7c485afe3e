"""The token buckets behind the per-client rate limits, on a fake clock; the key of a request; settings."""

from __future__ import annotations

import threading

import pytest

from application.settings import DEFAULT_SETTINGS, SettingsError
from interface.http.auth import Principal
from interface.http.rate_limits import TokenBuckets, client_key, policy_field, retry_after
from interface.http.settings import RateLimitSettings, decode_service_settings


class FakeTime:
    def __init__(self, value: float = 1000.0) -> None:
        self.value = value

    def __call__(self) -> float:
        return self.value


def drain(buckets: TokenBuckets, key: str, count: int) -> list[float]:
    return [buckets.take(key) for _ in range(count)]


def test_a_new_client_may_send_a_whole_burst_at_once_and_not_one_more() -> None:
    buckets = TokenBuckets(requests_per_second=10, burst=5, now=FakeTime())

    assert drain(buckets, "client:a", 5) == [0.0] * 5
    assert buckets.take("client:a") == pytest.approx(0.1)


def test_the_bucket_refills_at_the_configured_rate() -> None:
    time = FakeTime()
    buckets = TokenBuckets(requests_per_second=4, burst=2, now=time)
    drain(buckets, "client:a", 2)

    time.value += 0.25  # one token
    assert buckets.take("client:a") == 0.0
    assert buckets.take("client:a") == pytest.approx(0.25)
    time.value += 0.5  # two tokens
    assert drain(buckets, "client:a", 3) == [0.0, 0.0, pytest.approx(0.25)]


def test_a_token_due_now_is_not_lost_to_float_rounding() -> None:
    time = FakeTime(100.0)
    buckets = TokenBuckets(requests_per_second=10, burst=1, now=time)
    buckets.take("client:a")

    time.value = 100.0 + 0.1  # 100.1 - 100.0 is 0.09999999999999432 in floats

    assert buckets.take("client:a") == 0.0


def test_a_bucket_never_holds_more_than_the_burst() -> None:
    time = FakeTime()
    buckets = TokenBuckets(requests_per_second=100, burst=3, now=time)
    buckets.take("client:a")

    time.value += 3600

    assert drain(buckets, "client:a", 4) == [0.0, 0.0, 0.0, pytest.approx(0.01)]


def test_refused_requests_take_nothing_from_the_bucket() -> None:
    time = FakeTime()
    buckets = TokenBuckets(requests_per_second=1, burst=1, now=time)
    buckets.take("client:a")

    for _ in range(50):
        buckets.take("client:a")
    time.value += 1

    assert buckets.take("client:a") == 0.0


def test_the_wait_shrinks_as_time_passes() -> None:
    time = FakeTime()
    buckets = TokenBuckets(requests_per_second=0.5, burst=1, now=time)
    buckets.take("client:a")

    assert buckets.take("client:a") == pytest.approx(2.0)
    time.value += 1.5
    assert buckets.take("client:a") == pytest.approx(0.5)


def test_each_client_has_its_own_bucket() -> None:
    buckets = TokenBuckets(requests_per_second=1, burst=2, now=FakeTime())
    drain(buckets, "client:a", 3)

    assert buckets.take("client:b") == 0.0
    assert buckets.take("address:10.0.0.1") == 0.0


def test_buckets_idle_long_enough_to_be_full_are_forgotten_when_a_new_client_comes() -> None:
    time = FakeTime()
    buckets = TokenBuckets(requests_per_second=10, burst=20, now=time)  # full again after 2 s
    for key in ("client:a", "client:b", "client:c"):
        buckets.take(key)
    time.value += 1
    buckets.take("client:c")
    time.value += 1.5  # a and b idle for 2.5 s, c for 1.5 s

    buckets.take("client:d")

    assert len(buckets) == 2  # c and d


def test_a_forgotten_bucket_comes_back_full_as_it_would_have_been() -> None:
    time = FakeTime()
    buckets = TokenBuckets(requests_per_second=10, burst=5, now=time)
    drain(buckets, "client:a", 5)
    time.value += 1
    buckets.take("client:b")  # a is forgotten

    assert drain(buckets, "client:a", 6) == [0.0] * 5 + [pytest.approx(0.1)]


def test_the_number_of_buckets_is_bounded_by_evicting_the_least_recently_used() -> None:
    time = FakeTime()
    buckets = TokenBuckets(requests_per_second=1, burst=1, now=time, max_keys=3)
    for key in ("a", "b", "c"):
        buckets.take(key)
    buckets.take("a")  # b is now the least recently used

    buckets.take("d")

    assert len(buckets) == 3
    assert buckets.take("a") > 0  # still remembered: refused
    assert buckets.take("b") == 0.0  # forgotten: a full bucket again


def test_concurrent_takes_hand_out_exactly_the_burst() -> None:
    buckets = TokenBuckets(requests_per_second=1e-6, burst=500, now=FakeTime())
    allowed = []

    def worker() -> None:
        allowed.append(sum(1 for _ in range(100) if buckets.take("client:a") == 0.0))

    threads = [threading.Thread(target=worker) for _ in range(10)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert sum(allowed) == 500


@pytest.mark.parametrize(
    ("rate", "burst", "max_keys"), [(0, 1, 1), (-1, 1, 1), (1, 0, 1), (1, 1, 0), (float("nan"), 1, 1)]
)
def test_buckets_refuse_a_rate_or_size_that_cannot_work(rate: float, burst: int, max_keys: int) -> None:
    with pytest.raises(ValueError):
        TokenBuckets(rate, burst, max_keys=max_keys)


def test_a_draw_tells_what_the_bucket_holds_after_it() -> None:
    time = FakeTime()
    buckets = TokenBuckets(requests_per_second=2, burst=3, now=time)

    assert [buckets.draw("client:a") for _ in range(3)] == [(0.0, 2.0), (0.0, 1.0), (0.0, 0.0)]
    time.value += 0.25
    assert buckets.draw("client:a") == (pytest.approx(0.25), pytest.approx(0.5))  # refused: nothing taken
    assert buckets.full_after(0.5) == 2  # 2.5 tokens at 2 a second: 1.25 s, rounded up
    assert buckets.full_after(3.0) == 0


@pytest.mark.parametrize(
    ("rate", "burst", "policy"),
    [(200, 400, b'"default";q=400;w=2'), (2, 10, b'"default";q=10;w=5'), (3, 10, b'"default";q=10;w=4')],
)
def test_the_policy_is_the_buckets_size_per_the_seconds_it_takes_to_fill(rate, burst, policy) -> None:
    assert policy_field(TokenBuckets(rate, burst)) == policy


@pytest.mark.parametrize(("rate", "burst"), [(2, 10), (3, 10), (200, 400), (0.5, 1), (7, 3)])
def test_a_client_keeping_to_the_policy_is_never_refused(rate: float, burst: int) -> None:
    """q requests in any w seconds, sent as unkindly as the policy allows: each window's all at its start."""
    time = FakeTime()
    buckets = TokenBuckets(rate, burst, now=time)
    quota, window = (int(part.split(b"=")[1]) for part in policy_field(buckets).split(b";")[1:])

    for _ in range(20):
        assert drain(buckets, "client:a", quota) == [0.0] * quota
        time.value += window


@pytest.mark.parametrize(("wait", "seconds"), [(0.004, 1), (0.5, 1), (1.0, 1), (1.01, 2), (59.2, 60)])
def test_retry_after_is_whole_seconds_rounded_up_and_at_least_one(wait: float, seconds: int) -> None:
    assert retry_after(wait) == seconds


def test_an_authenticated_request_counts_against_its_client_wherever_it_comes_from() -> None:
    principal = Principal(client_id="demo-broker", partner="demo", roles=frozenset({"broker"}))

    assert client_key({"user": principal, "client": ("10.0.0.1", 5000)}) == "client:demo-broker"
    assert client_key({"user": principal, "client": ("10.0.0.2", 6000)}) == "client:demo-broker"


def test_a_request_without_a_token_counts_against_its_remote_address() -> None:
    assert client_key({"client": ("10.0.0.1", 5000)}) == "address:10.0.0.1"
    assert client_key({"user": None, "client": ("10.0.0.1", 6000)}) == "address:10.0.0.1"
    assert client_key({"client": None}) == "address:-"


def test_the_demo_settings_give_generous_limits() -> None:
    limits = decode_service_settings(DEFAULT_SETTINGS.read_bytes()).api.rate_limits

    assert limits == RateLimitSettings(enabled=True, requests_per_second=200, burst=400)


def test_settings_without_a_rate_limits_section_get_the_defaults() -> None:
    text = DEFAULT_SETTINGS.read_text()
    start = text.index("[rate_limits]")
    without = text[:start] + text[text.index("\n[", start) + 1 :]

    assert decode_service_settings(without).api.rate_limits == RateLimitSettings()
    assert RateLimitSettings() == RateLimitSettings(enabled=True, requests_per_second=200.0, burst=400)


NOT_POSITIVE = "rate_limits.requests_per_second must be a positive number"


@pytest.mark.parametrize(
    ("section", "problem"),
    [
        ("requests_per_second = 0\nburst = 10", NOT_POSITIVE),
        ("requests_per_second = -5\nburst = 10", NOT_POSITIVE),
        ("requests_per_second = nan\nburst = 10", NOT_POSITIVE),
        ("requests_per_second = inf\nburst = 10", NOT_POSITIVE),
        ("requests_per_second = 5\nburst = 0", "rate_limits.burst must be at least 1"),
    ],
)
def test_settings_refuse_rate_limits_that_cannot_work(section: str, problem: str) -> None:
    text = DEFAULT_SETTINGS.read_text().replace("requests_per_second = 200\nburst = 400", section)

    with pytest.raises(SettingsError) as refused:
        decode_service_settings(text)

    assert problem in refused.value.problems


@pytest.mark.parametrize(
    ("line", "wrong", "problem"),
    [
        ("burst = 400", "burst = 2.5", "Expected `int`"),
        ("burst = 400", "rate = 5", "unknown field `rate`"),
        ("enabled = true", "enabled = 1", "Expected `bool`"),
    ],
)
def test_settings_refuse_rate_limits_of_the_wrong_type_or_name(line: str, wrong: str, problem: str) -> None:
    text = DEFAULT_SETTINGS.read_text().replace(line, wrong)

    with pytest.raises(SettingsError) as refused:
        decode_service_settings(text)

    assert problem in refused.value.problems[0]
    assert "rate_limits" in refused.value.problems[0]
