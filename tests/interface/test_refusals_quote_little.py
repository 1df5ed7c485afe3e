"""A refusal names what was wrong without repeating what was sent at length (issue 25): a callback URL of two
thousand characters, a query value of twenty thousand, an api_version header of five thousand and an address
longer than any real one are quoted by their start and their length (`domain.errors.quoted_text`)."""

from __future__ import annotations

import re

from litestar.testing import TestClient

from domain.errors import QUOTED_TEXT
from tests.amount_fields import buy

LONGEST_QUOTE = QUOTED_TEXT + 2  # the quotes of its repr
SMALL_ANSWER = 2048


def longest_run_of_one_character(text: str) -> int:
    return max((len(match.group()) for match in re.finditer(r"(.)\1*", text)), default=0)


def assert_quoted_briefly(answer_text: str, sent_length: int) -> None:
    assert len(answer_text) < SMALL_ANSWER, answer_text[:300]
    assert longest_run_of_one_character(answer_text) <= LONGEST_QUOTE
    assert f"({sent_length} characters)" in answer_text


def test_a_long_refused_callback_url_is_quoted_by_its_start_and_length(
    client: TestClient, broker: dict[str, str], customer: dict[str, str]
) -> None:
    url = "https://hooks.invalid/" + "p" * 1970
    body = {**buy(customer), "callbackUrl": url}

    answer = client.post("/brokerbuy/simulate", json=body, headers=broker)

    assert answer.status_code == 422, answer.text[:300]
    assert answer.json()["code"] == "callback_url_refused"
    assert_quoted_briefly(answer.text, len(url))


def test_a_long_destination_address_is_quoted_by_its_start_and_length(
    client: TestClient, broker: dict[str, str], customer: dict[str, str]
) -> None:
    address = "bc1q" + "z" * 124
    body = {**buy(customer), "destinationAddress": address}

    answer = client.post("/brokerbuy/simulate", json=body, headers=broker)

    assert answer.status_code == 422, answer.text[:300]
    assert_quoted_briefly(answer.text, len(address))


def test_a_long_query_value_is_quoted_by_its_start_and_length(
    client: TestClient, broker: dict[str, str]
) -> None:
    status = "S" * 20_000

    answer = client.get("/transactions/custodian", params={"status": status}, headers=broker)

    assert answer.status_code == 400, answer.text[:300]
    assert answer.json()["code"] == "malformed_request"
    assert_quoted_briefly(answer.text, len(status))


def test_a_long_api_version_is_quoted_by_its_start_and_length(
    client: TestClient, broker: dict[str, str]
) -> None:
    version = "9" * 5000

    answer = client.get("/transactions/custodian", headers={**broker, "api_version": version})

    assert answer.status_code == 400, answer.text[:300]
    assert answer.json()["code"] == "api_version_unsupported"
    assert_quoted_briefly(answer.text, len(version))


def test_a_short_value_is_quoted_whole(client: TestClient, broker: dict[str, str]) -> None:
    answer = client.get("/transactions/custodian", params={"status": "Pending"}, headers=broker)

    assert answer.status_code == 400, answer.text[:300]
    assert "status='Pending'" in answer.json()["detail"]
