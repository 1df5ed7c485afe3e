"""The examples of docs/api.md run against the real server and answer as documented, value for value."""

from __future__ import annotations

import json
import os
import secrets
import time as pause
from datetime import UTC, datetime, time, timedelta
from decimal import Decimal

import pytest

from tests.process.api_docs import Example, compare, examples, run

RUN = "run" + secrets.token_hex(4)  # the guide's $RUN, written 1 in its answers


def test_the_api_guide_has_examples_with_documented_answers() -> None:
    found = examples()
    assert len(found) >= 10
    assert all(example.sample is not None for example in found)


GUIDE_TAKES_AT_MOST = timedelta(seconds=120)  # the time run() allows the examples


def outside_midnight(now: datetime, takes: timedelta = GUIDE_TAKES_AT_MOST) -> timedelta:
    """How long to wait so that a guide started after the wait ends on the UTC day it began: the guide is one
    day's activity (its limits show what that day's buy and sell used), so it never straddles midnight; on
    any other date or time of day it starts at once."""
    next_midnight = datetime.combine(now.date() + timedelta(days=1), time.min, UTC)
    return next_midnight - now + timedelta(seconds=1) if next_midnight - now < takes else timedelta(0)


@pytest.fixture(scope="module")
def printed(base_url: str, tokens: dict[str, str]) -> list[str]:
    pause.sleep(outside_midnight(datetime.now(UTC)).total_seconds())
    env = dict(
        os.environ, BASE=base_url, TOKEN=tokens["demo-broker"], OPERATOR=tokens["demo-operator"], RUN=RUN
    )
    return run(examples(), env)


def test_every_example_of_the_api_guide_answers_as_documented(printed: list[str]) -> None:
    assert compare(examples(), printed, RUN) == []


def answer(sample: str) -> list[Example]:
    return [Example('broker "$BASE/customer/alice-$RUN"', json.loads(sample, parse_float=Decimal))]


SAMPLE = (
    '{"transaction":{"transactionCode":"TX0123456789ABCDEF","customerCode":"alice-1","status":"Initiated",'
    '"destinationCryptoAddress":"bc1qcr8te4kr609gcawutmrza0j4xv80jy8z306fyu","fee":3.75,'
    '"created":"2026-11-21T23:40:00.000000Z","validUntil":"2026-11-22T00:10:00.000000Z"}}'
)


def printed_as(**changes: str) -> str:
    text = SAMPLE.replace("alice-1", f"alice-{RUN}")
    for old, new in changes.items():
        text = text.replace(old, new)
    return text


def test_codes_addresses_times_and_the_run_are_normalised() -> None:
    found = answer(SAMPLE)
    same = (
        printed_as(
            TX0123456789ABCDEF="TXFEDCBA9876543210",
            bc1qcr8te4kr609gcawutmrza0j4xv80jy8z306fyu="bc1qnjg0jd8228aq7egyzacy8cys3knf9xvrerkf9g",
        )
        .replace("2026-11-21T23:40:00.000000Z", "2027-01-02T03:04:05.123456Z")
        .replace("2026-11-22T00:10:00.000000Z", "2027-01-02T03:34:05.123456Z")
    )
    assert compare(found, [same], RUN) == []


@pytest.mark.parametrize(
    "changes",
    [
        {"3.75": "3.76"},  # another amount
        {"3.75": "3.750"},  # another scale
        {'"Initiated"': '"Confirming"'},
        {"bc1qcr8te4kr609gcawutmrza0j4xv80jy8z306fyu": "bc1qw508d6qejxtdg4y5r3zarvary0c5xw7kv8f3t4"},  # typed
        {"2026-11-22T00:10:00": "2026-11-22T00:40:00"},  # another validity window
        {',"fee":3.75': ""},
    ],
)
def test_the_comparison_notices_a_changed_answer(changes: dict[str, str]) -> None:
    found = [Example('broker "$BASE/x" -d \'{"a":"bc1qw508d6qejxtdg4y5r3zarvary0c5xw7kv8f3t4"}\'', None)]
    found[0].sample = answer(SAMPLE)[0].sample
    assert compare(found, [printed_as(**changes)], RUN) != []


def test_a_documented_time_at_hour_24_is_refused() -> None:
    found = answer(SAMPLE.replace("2026-11-22T00:10:00", "2026-11-21T24:10:00"))
    assert compare(found, [printed_as()], RUN) != []


def test_one_code_documented_for_two_transactions_is_noticed() -> None:
    two = '[{"transactionCode":"TX0123456789ABCDEF"},{"transactionCode":"TX0123456789ABCDEF"}]'
    found = [Example("true", json.loads(two, parse_float=Decimal))]
    given = two.replace('ABCDEF"}]', 'ABCDE0"}]')
    assert compare(found, [given], RUN) != []


LIMITS = (
    '{"limits":[{"direction":"buy","period":"daily","periodKey":"2026-11-24","used":100.00},'
    '{"direction":"buy","period":"monthly","periodKey":"2026-11","used":100.00}]}'
)


def limits_example() -> list[Example]:
    return [Example('broker "$BASE/customer/alice-$RUN/limits"', json.loads(LIMITS, parse_float=Decimal))]


@pytest.mark.parametrize(
    ("day", "month"), [("2026-12-31", "2026-12"), ("2027-01-01", "2027-01"), ("2028-02-29", "2028-02")]
)
def test_limits_documented_in_one_month_match_an_answer_of_any_other(day: str, month: str) -> None:
    given = LIMITS.replace("2026-11-24", day).replace('"2026-11"', f'"{month}"')
    assert compare(limits_example(), [given], RUN) == []


@pytest.mark.parametrize(("day", "month"), [("2026-12-31", "2027-01"), ("2027-01-01", "2026-12")])
def test_a_monthly_window_of_another_month_than_the_daily_one_is_noticed(day: str, month: str) -> None:
    given = LIMITS.replace("2026-11-24", day).replace('"2026-11"', f'"{month}"')
    assert compare(limits_example(), [given], RUN) != []


def test_a_changed_amount_of_a_limit_is_still_noticed_in_another_month() -> None:
    given = (
        LIMITS.replace("2026-11-24", "2027-03-01")
        .replace('"2026-11"', '"2027-03"')
        .replace("100.00}]", "0.00}]")
    )
    assert compare(limits_example(), [given], RUN) != []


@pytest.mark.parametrize(
    ("now", "wait"),
    [
        (datetime(2026, 12, 31, 23, 59, 50, tzinfo=UTC), timedelta(seconds=11)),
        (datetime(2028, 2, 29, 23, 58, 1, tzinfo=UTC), timedelta(seconds=120)),
        (datetime(2028, 2, 29, 23, 58, 0, tzinfo=UTC), timedelta(0)),
        (datetime(2026, 12, 2, 12, 0, tzinfo=UTC), timedelta(0)),
    ],
)
def test_the_guide_waits_out_a_midnight_it_would_straddle_and_no_other_time(
    now: datetime, wait: timedelta
) -> None:
    assert outside_midnight(now) == wait
