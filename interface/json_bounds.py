"""What a JSON request body may hold, checked before anything walks it or computes with it.

- **Nesting**: arrays and objects at most MAX_NESTING deep, counted on the raw bytes in one pass with the
  strings left out, before the body is decoded; deeper is 400 `malformed_request`. No body of this API nests
  more than three levels, and the walks that follow (the decoder, the duplicate-key scan, the storable-text
  check, the schema) then never go deep.
- **Numbers**: the decoders read every number with a fraction or an exponent through `read_number`, and an
  integer too long for msgspec through `read_integer`. A number outside `domain.money`'s bounds
  (`within_bounds`: digits before and after the point as written) becomes OUT_OF_BOUNDS, a NaN, which no JSON
  text can spell: no huge number is ever built, written out or rounded. Where the body declares a number (an
  amount, an integer), `number_problem` refuses such a number, and an integer out of the bounds, naming the
  field and the bounds, never quoting what was sent.
"""

from __future__ import annotations

import decimal
import itertools
import re
from decimal import Decimal
from typing import Any

from domain.money import DIGITS_BEFORE_POINT, NUMBER_BOUNDS, within_bounds
from interface.problems import RequestRefused

MAX_NESTING = 32
OUT_OF_BOUNDS = Decimal("NaN")
# A JSON string, or what starts as one and is cut off (then to the end of the body, a last lone backslash
# included): a string once begun always matches, possessively, so no later quote is tried again as its start,
# and the pass is linear in the body's length (`"\"\"\"...` without its last quote took quadratic time).
JSON_STRING = re.compile(rb'"[^"\\]*+(?:\\.[^"\\]*+)*+(?:"|\\?\Z)', re.DOTALL)
NOT_A_BRACKET = bytes(sorted(set(range(256)) - set(b"[]{}")))
NESTING_STEP = {ord("["): 1, ord("{"): 1, ord("]"): -1, ord("}"): -1}


def refuse_deep_nesting(body: bytes) -> None:
    """400 for a body whose arrays and objects nest deeper than MAX_NESTING."""
    if body.count(b"[") + body.count(b"{") <= MAX_NESTING:
        return  # it cannot nest deeper than it has brackets
    depth = nesting_depth(body)
    if depth > MAX_NESTING:
        raise RequestRefused(
            400,
            "malformed_request",
            f"the request body nests arrays and objects {depth} levels deep; at most {MAX_NESTING} are read",
        )


def nesting_depth(body: bytes) -> int:
    """How deep the arrays and objects of a JSON text nest (brackets inside strings do not count): the
    highest running count of opening less closing brackets, in one pass over the brackets alone."""
    brackets = JSON_STRING.sub(b"", body).translate(None, NOT_A_BRACKET)
    return max(itertools.accumulate(map(NESTING_STEP.__getitem__, brackets)), default=0)


def read_number(text: str) -> Decimal:
    """A JSON number with a fraction or an exponent, exactly as written, or OUT_OF_BOUNDS. Reading its
    digits costs what reading the body does (a Decimal holds them as written, its exponent apart); only
    rounding or writing one out could cost more."""
    try:
        number = Decimal(text)
    except decimal.InvalidOperation:  # an exponent beyond what a Decimal can hold
        return OUT_OF_BOUNDS
    return number if within_bounds(number) else OUT_OF_BOUNDS


def read_integer(text: str) -> int | Decimal:
    """A JSON integer read by Python's decoder (whose own conversion refuses over 4300 digits), or
    OUT_OF_BOUNDS."""
    return int(text) if len(text.lstrip("-")) <= DIGITS_BEFORE_POINT else OUT_OF_BOUNDS


def number_problem(value: Any, where: str) -> str | None:
    """Where the body declares a number: the problem of a number outside the bounds, else None."""
    if isinstance(value, bool) or not isinstance(value, int | Decimal) or within_bounds(value):
        return None
    return f"Expected a number with {NUMBER_BOUNDS} - at `{where}`"
