"""Deterministic aggregate ids: the same business key always names the same aggregate, so a second create
of the same object fails on the event store's primary key, and another partner's key names nothing."""

from __future__ import annotations

from functools import lru_cache
from uuid import UUID, uuid5

NAMESPACE = UUID("6f0d1c5e-3b8a-4f55-9f0e-b20a1e6c9d41")


@lru_cache(maxsize=65536)  # a request names the same few aggregates several times (a SHA-1 each)
def business_id(kind: str, *parts: str) -> UUID:
    return uuid5(NAMESPACE, "\x1f".join((kind, *parts)))
