"""The events feed's cursors: a log position written as an opaque text and read back exactly; every text of
the documented form is a cursor (no value the API document accepts is refused), any other text is refused
with 400 saying what a cursor is."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from interface.events.cursors import MOST, PATTERN, cursor_of, position_of
from interface.http.problems import ApiProblem


@given(st.integers(min_value=0, max_value=MOST - 1))
def test_a_cursor_names_its_position_and_has_the_documented_form(position: int) -> None:
    cursor = cursor_of(position)
    assert re.match(PATTERN, cursor)
    assert position_of("after", cursor) == position


@given(st.from_regex(PATTERN))
def test_every_text_of_the_documented_form_is_a_cursor(text: str) -> None:
    assert cursor_of(position_of("after", text)) == text


def test_each_position_has_a_cursor_of_its_own() -> None:
    assert len({cursor_of(position) for position in range(1000)}) == 1000


@pytest.mark.parametrize(
    "text", ["", "ZXYxOg", "ZXYxOgAAAAAAAAA", "ZXYxOgAAAAAAAAAAA", "ZXYxOh__________", "a" * 16]
)
def test_any_other_text_is_refused_saying_what_a_cursor_is(text: str) -> None:
    with pytest.raises(ApiProblem) as refused:
        position_of("after", text)
    assert refused.value.status_code == 400
    assert "is not a cursor of this feed" in refused.value.detail


def test_a_position_beyond_the_cursors_range_has_none() -> None:
    with pytest.raises(ValueError):
        cursor_of(MOST)
    with pytest.raises(ValueError):
        cursor_of(-1)
