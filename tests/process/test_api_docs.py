"""The examples of docs/api.md run against the real server and answer as documented, value for value."""

from __future__ import annotations

import json
import os
import secrets
from decimal import Decimal

import pytest

from tests.process.api_docs import Example, compare, examples, run

RUN = "run" + secrets.token_hex(4)  # the guide's $RUN, written 1 in its answers


def test_the_api_guide_has_examples_with_documented_answers() -> None:
    found = examples()
    assert len(found) >= 10
    assert all(example.sample is not None for example in found)


@pytest.fixture(scope="module")
def printed(base_url: str, tokens: dict[str, str]) -> list[str]:
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
