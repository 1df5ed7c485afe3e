"""Every amount field of every endpoint (`tests.amount_fields`) driven through the real app with JSON numbers
of any size and exponent: a digit or five thousand before the point and after it, exponents from 0 to
10^30 either way, negative or not.

Whatever the number, the answer is a 2xx or a 4xx (never a 5xx), of at most a few KB, and quotes no run of
more than 40 digits; a number out of the bounds (more than 30 digits before the decimal point or after it,
as written) is refused with 422 `validation_failed` naming its field and the bounds, before anything
computes with it. The work a request may do is bounded that way rather than timed here (bench/number_bounds.py
prints the time of the largest numbers).
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from litestar.testing import TestClient
from msgspec import inspect

from tests.amount_fields import AMOUNT_FIELDS, AmountField, Holder
from tests.e2e.support import AddressSource
from tests.in_process import InProcessClient, in_process_app

BOUND = 30  # digits before the decimal point, and after it
LARGEST_ANSWER = 4096  # bytes
LONG_DIGIT_RUN = re.compile(rb"\d{41,}")
PROBLEM_JSON = "application/problem+json"

DIGITS = st.one_of(
    st.text("0123456789", max_size=40),
    st.builds(lambda digit, count: digit * count, st.sampled_from("0123456789"), st.integers(0, 5000)),
)
EXPONENTS = st.one_of(
    st.integers(-40, 40),
    st.integers(-(10**6), 10**6),
    st.integers(-(10**30), 10**30),
    st.sampled_from([308, -308, 999_999_999, -999_999_999]),
)


@st.composite
def json_numbers(draw: st.DrawFn) -> str:
    """The text of a JSON number: `-?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?`."""
    sign = draw(st.sampled_from(["", "-"]))
    whole = draw(st.just("0") | st.builds(str.__add__, st.sampled_from("123456789"), DIGITS))
    fraction = draw(st.none() | DIGITS.filter(bool))
    exponent = draw(st.none() | EXPONENTS)
    letter = draw(st.sampled_from(["e", "E"]))
    plus = draw(st.sampled_from(["", "+"]))
    text = sign + whole + ("" if fraction is None else f".{fraction}")
    if exponent is not None:
        text += f"{letter}{plus if exponent >= 0 else ''}{exponent}"
    return text


def digits_as_written(number: str) -> tuple[int, int]:
    """How many digits a JSON number has before its decimal point and after it, its exponent applied to the
    digits as written (`1E+30`: 31 and none; `1.50`: 1 and 2)."""
    mantissa, _, exponent = number.lower().lstrip("-").partition("e")
    whole, _, fraction = mantissa.partition(".")
    after = len(fraction) - int(exponent or 0)
    coefficient = (whole + fraction).lstrip("0") or "0"
    return len(coefficient) - after, after


client = in_process_app()


@pytest.fixture(scope="module")
def roles(client: InProcessClient) -> dict[str, dict[str, str]]:
    headers = {role: client.headers_of(f"demo-{role}") for role in ("broker", "operator")}
    return {role: {**given, "content-type": "application/json"} for role, given in headers.items()}


@pytest.fixture(scope="module")
def holder(client: InProcessClient, roles: dict[str, dict[str, str]]) -> Holder:
    code, address = f"bounds-{uuid.uuid4().hex[:10]}", AddressSource()()
    customer = {"customerCode": code, "trustLevel": "Basic", "status": "ACTIVE"}
    assert client.post("/customer", json=customer, headers=roles["broker"]).status_code == 201
    opened = client.post(
        f"/customer/{code}/accounts", json={"customerCryptoAddress": address}, headers=roles["broker"]
    )
    assert opened.status_code == 201, opened.text
    return {"code": code, "account": opened.json()["accountCode"], "address": address}


def send(client: InProcessClient, roles: dict[str, dict[str, str]], field: AmountField, body: bytes) -> Any:
    return client.request(field.method, field.path, content=body, headers=roles[field.role])


@pytest.mark.parametrize("field", AMOUNT_FIELDS, ids=lambda field: field.id)
@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[
        HealthCheck.function_scoped_fixture,
        HealthCheck.too_slow,
        HealthCheck.large_base_example,
        HealthCheck.data_too_large,
    ],
)
@given(number=json_numbers())
def test_any_number_in_an_amount_field_is_answered_small_and_never_with_a_5xx(
    client: InProcessClient,
    roles: dict[str, dict[str, str]],
    holder: Holder,
    field: AmountField,
    number: str,
) -> None:
    answer = send(client, roles, field, field.request(holder, number))

    assert answer.status_code < 500, answer.text[:500]
    assert len(answer.content) <= LARGEST_ANSWER
    assert LONG_DIGIT_RUN.search(answer.content) is None, answer.text[:500]
    if answer.status_code >= 400:
        assert answer.headers["content-type"].startswith(PROBLEM_JSON)
    before, after = digits_as_written(number)
    if before > BOUND or after > BOUND:
        problem = answer.json()
        assert (answer.status_code, problem["code"]) == (422, "validation_failed"), answer.text
        assert f"at most {BOUND} digits before the decimal point" in problem["detail"]
        assert f"`$.{field.name}`" in problem["detail"]


def test_every_amount_field_of_every_request_body_is_driven(client: InProcessClient) -> None:
    driven = {(field.operation, field.name) for field in AMOUNT_FIELDS}
    assert driven == set(_decimal_fields(client))


def _decimal_fields(client: TestClient) -> Iterator[tuple[str, str]]:
    """(operationId, field) of every decimal field of a request body the app's routes decode."""
    for route in client.app.routes:
        for handler in getattr(route, "route_handlers", []):
            data = getattr(handler, "parsed_data_field", None)
            if data is not None:
                for name in _decimals(inspect.type_info(data.annotation)):
                    yield handler.operation_id, name


def _decimals(info: inspect.Type) -> Iterator[str]:
    if isinstance(info, inspect.UnionType):
        for option in info.types:
            yield from _decimals(option)
    elif isinstance(info, inspect.StructType):
        for field in info.fields:
            inner = field.type.type if isinstance(field.type, inspect.Metadata) else field.type
            options = inner.types if isinstance(inner, inspect.UnionType) else (inner,)
            if any(isinstance(getattr(o, "type", o), inspect.DecimalType) for o in options):
                yield field.encode_name
