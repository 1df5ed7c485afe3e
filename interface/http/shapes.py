"""The shapes every body builds on: the base of request and response bodies, the field types that features
share, timestamps, and a problem's body."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from typing import Annotated

import msgspec


class Body(msgspec.Struct, kw_only=True, frozen=True, rename="camel", forbid_unknown_fields=True):
    """Base of every request and response body."""


# Patterns end in \Z, the end of the text: `$` also matches before a final newline, so "alice\n" would pass
# for a code that reads as "alice". The API document and the refusals show them with `$` (`ecma_pattern`).
CODE_PATTERN = r"^[A-Za-z0-9._:@-]+\Z"
Code = msgspec.Meta(min_length=1, max_length=64, pattern=CODE_PATTERN)
Text = msgspec.Meta(max_length=512)


def ecma_pattern(pattern: str) -> str:
    """A pattern as ECMA-262 writes it, for the API document: Python's `\\Z` has no ECMA-262 form, and there
    `$` without the m flag is the end of the text."""
    return pattern.removesuffix("\\Z") + "$" if pattern.endswith("\\Z") else pattern


def documented_patterns(message: str) -> str:
    """A refusal of msgspec's that quotes a pattern (`matching regex '^[A-Z]{3}\\\\Z'`, its repr), with the
    pattern as the API document shows it."""
    return message.replace("\\\\Z'", "$'")


def example(value: object) -> msgspec.Meta:
    """An example for the API document; the examples together make a request the demo settings accept."""
    return msgspec.Meta(examples=[value])


EXAMPLE_CUSTOMER = "alice"
# A BTC address of the BIP39 test mnemonic (index 1000, far from the service's own deposit addresses)
EXAMPLE_ADDRESS = "bc1q2r6gwzc9em5vrywu66qkzpp5ujeep9qp80umeq"
EXAMPLE_ACCOUNT = "ACC8943623393206284D"  # alice's account of that address, for the demo partner

CustomerCode = Annotated[str, Code, example(EXAMPLE_CUSTOMER)]
Currency = Annotated[str, msgspec.Meta(min_length=3, max_length=3, pattern=r"^[A-Z]{3}\Z"), example("EUR")]
CryptoCode = Annotated[
    str, msgspec.Meta(min_length=2, max_length=10, pattern=r"^[A-Z0-9]+\Z"), example("BTC")
]
Address = Annotated[str, msgspec.Meta(min_length=1, max_length=128), example(EXAMPLE_ADDRESS)]
Metadata = Annotated[
    dict[Annotated[str, msgspec.Meta(max_length=64)], Annotated[str, Text]], msgspec.Meta(max_length=32)
]
OptionalText = Annotated[str, Text] | None
Amount = Annotated[
    Decimal,
    # refused when not above zero (422 amount_not_positive, not a schema error): said in the document only
    msgspec.Meta(
        description="decimal amount, a JSON number above zero", extra_json_schema={"exclusiveMinimum": 0}
    ),
]
Timestamp = Annotated[datetime, msgspec.Meta(tz=True)]


class Problem(msgspec.Struct, kw_only=True, frozen=True):
    """RFC 9457 problem details, with a stable `code`, one line per problem in `errors`, and in `requestId`
    the id of the request that was refused (as its answer's `X-Request-Id` and its access log line say)."""

    type: str
    title: str
    status: int
    detail: str
    code: str
    errors: list[str]
    request_id: str | None = msgspec.field(default=None, name="requestId")
