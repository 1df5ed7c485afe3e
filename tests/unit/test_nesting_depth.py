"""How deep a request body nests, counted on its bytes before anything decodes it
(`interface.http.bodies.nesting_depth`): brackets inside strings do not count, and a string that is cut
off
runs to the end of the body."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from interface.http.bodies import nesting_depth

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(alphabet='[]{}"\\x ', max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3),
    max_leaves=20,
)


def depth_of(value: object) -> int:
    if isinstance(value, list):
        return 1 + max((depth_of(item) for item in value), default=0)
    if isinstance(value, dict):
        return 1 + max((depth_of(item) for item in value.values()), default=0)
    return 0


@given(json_values)
def test_the_depth_of_any_json_text_is_that_of_its_value(value: object) -> None:
    assert nesting_depth(json.dumps(value).encode()) == depth_of(value)


@pytest.mark.parametrize(
    ("body", "depth"),
    [
        (b'[["[[[", "\\"[["]]', 2),
        (b'[["cut off [[[', 2),
        (b'[["cut off after a backslash \\', 2),
        (b"[" * 40 + b'"' + b'\\"' * 1000, 40),
    ],
)
def test_a_string_cut_off_counts_no_bracket_after_its_start(body: bytes, depth: int) -> None:
    assert nesting_depth(body) == depth
