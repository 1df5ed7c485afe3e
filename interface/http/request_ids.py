"""Each request's id, named by its answer's `X-Request-Id`, its access log line and its problem body.

A request that brings a well-formed `X-Request-Id` keeps it: 1 to 128 characters, each an ASCII letter or
digit or one of `_ . : -` (a UUID, a ULID, `req_01H...`, `gateway-7:1234` all are). Any other value (empty,
longer, with a space, a quote, a control character or anything not ASCII), and a header sent twice, is
replaced by a new id, never echoed: the id goes into a header, a log line and a JSON body as it is, so it can
carry nothing that would split or forge one. A request without one is given a new id, a random UUID.

The application (`interface.http.observability.ObservedLitestar`) settles the id when the request arrives and
keeps it in the request's scope (`request_id_of`), where a problem's answer reads it as it is sent
(`interface.http.problems.ProblemResponse`), so that no refusal needs to be handed the request for it.
"""

from __future__ import annotations

import os
import re
from typing import Any

HEADER = b"x-request-id"
WELL_FORMED = re.compile(rb"[A-Za-z0-9_.:-]{1,128}")  # matched whole (`fullmatch`)
# the first digit of a version 4 UUID's fourth group holds its variant (binary 10..): 8, 9, a or b
VARIANT = {digit: "89ab"[int(digit, 16) % 4] for digit in "0123456789abcdef"}
STATE_KEY = "request_id"  # where the id is kept in the request scope's state


def request_id_for(incoming: bytes | None) -> str:
    """The id of a request that brought `incoming` as its X-Request-Id (None: none, or more than one)."""
    if incoming is not None and WELL_FORMED.fullmatch(incoming):
        return incoming.decode("ascii")
    return new_request_id()


def new_request_id() -> str:
    """A random UUID (version 4), written as `uuid.uuid4()` writes one, without building the UUID object
    (in about half the time, on every request that brings no id)."""
    digits = os.urandom(16).hex()
    variant = VARIANT[digits[16]]
    return f"{digits[:8]}-{digits[8:12]}-4{digits[13:16]}-{variant}{digits[17:20]}-{digits[20:]}"


def keep_request_id(scope: Any, request_id: str) -> None:
    """Keeps the request's id in its scope (`request_id_of`)."""
    scope.setdefault("state", {})[STATE_KEY] = request_id


def request_id_of(scope: Any) -> str | None:
    """The id of the request of `scope`, None outside the application (a scope it never saw)."""
    return scope.get("state", {}).get(STATE_KEY)
