"""The examples of docs/api.md run against the real server and answer as documented."""

from __future__ import annotations

import json
import os
import secrets
from decimal import Decimal

import pytest

from tests.e2e.api_docs import examples, run, shape_differences


def test_the_api_guide_has_examples_with_documented_answers() -> None:
    found = examples()
    assert len(found) >= 10
    assert all(example.sample is not None for example in found)


@pytest.fixture(scope="module")
def answers(base_url: str, tokens: dict[str, str]) -> list[tuple[object, object]]:
    env = dict(
        os.environ,
        BASE=base_url,
        TOKEN=tokens["demo-broker"],
        OPERATOR=tokens["demo-operator"],
        RUN=secrets.token_hex(4),
    )
    found = examples()
    printed = run(found, env)
    return [
        (example.sample, json.loads(text, parse_float=Decimal))
        for example, text in zip(found, printed, strict=True)
    ]


def test_every_example_of_the_api_guide_answers_as_documented(answers: list[tuple[object, object]]) -> None:
    problems = [
        f"example {number}: {difference}"
        for number, (sample, actual) in enumerate(answers, start=1)
        for difference in shape_differences(sample, actual)
    ]
    assert problems == []


def test_the_shape_check_notices_a_changed_answer() -> None:
    sample = {"transaction": {"status": "Staged", "fees": {"partnerFeeFiat": 1}}}
    assert shape_differences(sample, {"transaction": {"status": "Sending", "fees": {"partnerFeeFiat": 1}}})
    assert shape_differences(sample, {"transaction": {"status": "Staged", "fees": {}}})
    assert not shape_differences(sample, {"transaction": {"status": "Staged", "fees": {"partnerFeeFiat": 2}}})
