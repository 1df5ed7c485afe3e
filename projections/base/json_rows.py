"""Rows sent to PostgreSQL as one JSON parameter per statement: how the projections' page helpers
(`projections.base.postgres`) write a page's rows, and pass a page's ids.

msgspec writes the JSON in C and PostgreSQL reads it, on a core of its own; psycopg would dump each value
of per-column arrays (`unnest(%b::type[], ...)`) in Python, which cost more than all the rest of writing a
page. The values come back exactly: a Decimal as its string, a datetime in RFC 3339 with its offset, a
date as ISO 8601, a UUID as text, bytes as base64 (`bytea`), a dict as JSON (`jsonb`), None as NULL.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec

# `id = ANY_ID`: ids (UUIDs) sent by `as_json`
ANY_ID = "ANY(ARRAY(SELECT jsonb_array_elements_text(%s::jsonb)::uuid))"
ROWS_AS_JSON = msgspec.json.Encoder()


def json_rows(types: str) -> str:
    """A `SELECT` of rows sent as one JSON array of arrays (the parameter `as_json` makes), one column per
    SQL type of `types` ("bigint, text, ..."), in order: what a page's statements insert from."""
    selected = ", ".join(_json_column(i, type_.strip()) for i, type_ in enumerate(types.split(",")))
    return f"SELECT {selected} FROM jsonb_array_elements(%s::jsonb) AS r"


def _json_column(index: int, type_: str) -> str:
    if type_ == "jsonb":
        return f"r->{index}"
    if type_ == "bytea":
        return f"decode(r->>{index}, 'base64')"
    return f"(r->>{index})::{type_}"


def as_json(rows: Sequence[Any]) -> tuple[str]:
    """The parameters of a `json_rows` statement for `rows` (tuples of Python values), or of one with
    `ANY_ID` for ids."""
    return (ROWS_AS_JSON.encode(rows).decode(),)
