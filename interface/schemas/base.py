from __future__ import annotations

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
