"""The bounds on numbers read from requests (`domain.money.within_bounds`) and what they buy: a number
within them rounds to any asset's scale, and is read as a double, without a decimal signal; the amount rules
judge any number, inside the bounds or far out of them, with a refusal quoting at most QUOTED_CHARACTERS of
it."""

from __future__ import annotations

from decimal import Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from domain.errors import DomainError
from domain.money import (
    DIGITS_AFTER_POINT,
    DIGITS_BEFORE_POINT,
    QUOTED_CHARACTERS,
    Asset,
    as_a_double_carries,
    normalized,
    quoted,
    within_bounds,
)
from domain.pricing import check_amount

FAST = settings(max_examples=200, deadline=None)
COEFFICIENTS = st.integers(0, 10**60 - 1) | st.integers(0, 10**400)
# A Decimal holds exponents up to 10^18 either way; JSON texts beyond that are refused before one is built
EXPONENTS = st.integers(-40, 40) | st.integers(-(10**17), 10**17)
SCALES = st.integers(0, 18)


@st.composite
def any_numbers(draw: st.DrawFn) -> Decimal:
    sign = draw(st.sampled_from(["", "-"]))
    return Decimal(f"{sign}{draw(COEFFICIENTS)}E{draw(EXPONENTS)}")


@st.composite
def bounded_numbers(draw: st.DrawFn) -> Decimal:
    """Numbers with at most 30 digits before the point and 30 after it, as written."""
    after = draw(st.integers(0, DIGITS_AFTER_POINT))
    digits = draw(st.integers(1, DIGITS_BEFORE_POINT + after))
    coefficient = draw(st.integers(0, 10**digits - 1))
    sign = draw(st.sampled_from(["", "-"]))
    return Decimal(f"{sign}{coefficient}E-{after}")


@FAST
@given(number=bounded_numbers(), places=SCALES)
def test_a_number_within_the_bounds_rounds_to_any_scale_without_a_signal(
    number: Decimal, places: int
) -> None:
    asset = Asset("X", places)

    down, up, nearest = asset.down(number), asset.up(number), asset.nearest(number)

    assert within_bounds(number)
    assert down <= number <= up and up - down <= asset.quantum
    assert abs(nearest - number) <= asset.quantum / 2
    assert asset.is_exact(number) == (down == number)


@FAST
@given(number=bounded_numbers())
def test_a_number_within_the_bounds_is_read_as_a_double_and_normalized_without_a_signal(
    number: Decimal,
) -> None:
    assert normalized(number) == number
    read = as_a_double_carries(number)
    assert abs(read - number) <= abs(number) * Decimal("1e-14")


@FAST
@given(number=any_numbers(), places=SCALES)
def test_the_amount_rules_judge_any_number_with_a_short_refusal(number: Decimal, places: int) -> None:
    try:
        check_amount(Asset("X", places), number, "amount")
    except DomainError as refused:
        assert len(refused.detail) <= QUOTED_CHARACTERS + 80
    else:
        assert 0 < number < Decimal("1e15")


@FAST
@given(number=any_numbers())
def test_an_amount_is_quoted_in_a_few_dozen_characters_and_plain_ones_as_they_are(number: Decimal) -> None:
    shown = quoted(number)

    assert len(shown) <= QUOTED_CHARACTERS
    if "E" not in shown:
        assert Decimal(shown) == number


@FAST
@given(number=any_numbers())
def test_a_number_out_of_the_bounds_is_left_as_it_is_by_the_double_reading(number: Decimal) -> None:
    if not within_bounds(number):
        assert as_a_double_carries(number) is number


@pytest.mark.parametrize(
    ("number", "within"),
    [
        (Decimal("1E+29"), True),
        (Decimal("1E+30"), False),  # 31 digits before the point
        (Decimal("1e-30"), True),
        (Decimal("1e-31"), False),
        (Decimal("1." + "0" * 31), False),  # trailing zeros are digits as written
        (Decimal("9" * 30 + "." + "9" * 30), True),
        (10**30 - 1, True),
        (10**30, False),
        (-(10**30), False),
        (Decimal("NaN"), False),
        (Decimal("-Infinity"), False),
    ],
)
def test_the_bounds_count_digits_as_written(number: Decimal | int, within: bool) -> None:
    assert within_bounds(number) == within


def test_a_huge_amount_is_quoted_by_its_leading_digits_and_magnitude() -> None:
    assert quoted(Decimal("1E+999999999")) == "1E+999999999"
    assert quoted(Decimal("-1234567890123456789E-999999999")) == "-1.23456789012...E-999999981"
    assert quoted(Decimal("123456789012345678901234567890.123456789012")) == "1.23456789012...E+29"
    assert quoted(Decimal("123456789012345678901234567890.123")) == "123456789012345678901234567890.123"
    assert quoted(Decimal("50.305")) == "50.305"
