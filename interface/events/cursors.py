"""The feed's cursors: a position in the event log (a notification id), written as an opaque text.

A cursor is the base64url (no padding) of the tag `ev1:` and the position as 8 bytes, big-endian: 16
characters that all begin `ZXYxOg` (the tag, and the position's top bits, which stay 0 below 2^60). The
tag's version lets a later form of cursor be told apart and still read. Clients keep and send cursors as
they got them; nothing about them is promised but that a cursor the feed gave stays valid for good (a
position in the log is never reused, and the index is keyed by it: `projections/events_feed.py`).

A text that is no cursor is refused with 400 `malformed_request`, saying what a cursor is; every text of
the form the API document gives (`PATTERN`) is one, so no value the document accepts is refused."""

from __future__ import annotations

import base64
import binascii
import re

from domain.errors import quoted_text
from interface.http.problems import ApiProblem

TAG = b"ev1:"
POSITION_BYTES = 8
MOST = 2**60  # positions below it keep the cursor's first six characters `ZXYxOg`
PATTERN = r"^ZXYxOg[A-Za-z0-9_-]{10}\Z"
FORM = re.compile(PATTERN)
START = 0  # the position before the first event: reading after it reads the feed from its beginning


def cursor_of(position: int) -> str:
    """The cursor of `position` (0 to 2^60 - 1)."""
    if not 0 <= position < MOST:
        raise ValueError(f"no cursor for position {position}")
    raw = TAG + position.to_bytes(POSITION_BYTES, "big")
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def position_of(name: str, cursor: str) -> int:
    """The position a cursor names; 400 `malformed_request` naming the query parameter for any text that is
    not a cursor of this feed."""
    if FORM.match(cursor):
        try:
            raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        except (binascii.Error, ValueError):
            raw = b""
        if raw.startswith(TAG) and len(raw) == len(TAG) + POSITION_BYTES:
            return int.from_bytes(raw[len(TAG) :], "big")
    raise ApiProblem(
        400,
        "malformed_request",
        f"query parameter {name}={quoted_text(cursor)} is not a cursor of this feed: give the `cursor` of "
        "an event or the `nextCursor` of a page exactly as the feed gave it (16 characters beginning "
        "ZXYxOg), or leave it out to read from the beginning",
    )


def ahead_of_log(name: str, position: int, head: int) -> ApiProblem:
    """409 for a cursor past the log's head: no cursor this ledger gave (a position is only ever given once
    the log holds it), or one given before the ledger was restored to an earlier time, after which the
    positions past the head will be given to other events: reading on from it would miss them."""
    return ApiProblem(
        409,
        "cursor_ahead_of_log",
        f"query parameter {name} names position {position} of the event log, past its head ({head}): this "
        "ledger gave no such cursor (or gave it before being restored to an earlier time); read from an "
        "earlier cursor, or from the beginning",
    )
