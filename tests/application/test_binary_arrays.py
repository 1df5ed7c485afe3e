"""Arrays built in PostgreSQL's binary format come back from the server as the values sent."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone

import psycopg
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from application.store.binary_arrays import (
    ByteaArray,
    Int4Array,
    Int8Array,
    TextArray,
    TimestamptzArray,
    UUIDArray,
    columns,
)

STORABLE_TEXT = st.text(st.characters(blacklist_categories=["Cs"], blacklist_characters="\x00"))


@pytest.fixture(scope="module")
def connection(database_url: str) -> Iterator[psycopg.Connection]:
    with psycopg.connect(database_url, autocommit=True) as conn:
        yield conn


def round_trip(connection: psycopg.Connection, array: object, cast: str) -> list:
    return connection.execute(f"SELECT %b::{cast}[]", [array]).fetchone()[0]


def test_each_array_comes_back_as_sent_with_its_nulls(connection):
    ids = [uuid.uuid4(), None, uuid.uuid4()]
    moments = [
        datetime(2026, 11, 26, 15, 0, 0, 123456, tzinfo=UTC),
        datetime(1999, 12, 31, 23, 59, 59, tzinfo=UTC),
    ]
    assert round_trip(connection, UUIDArray(ids), "uuid") == ids
    assert round_trip(connection, TextArray(["plain", "é€🙂", "", None]), "text") == [
        "plain",
        "é€🙂",
        "",
        None,
    ]
    assert round_trip(connection, ByteaArray([b"\x00\xff", b"", None]), "bytea") == [b"\x00\xff", b"", None]
    assert round_trip(connection, Int8Array([0, -(2**63), 2**63 - 1, None]), "int8") == [
        0,
        -(2**63),
        2**63 - 1,
        None,
    ]
    assert round_trip(connection, Int4Array([201, -1, None]), "int4") == [201, -1, None]
    assert round_trip(connection, TimestamptzArray(moments), "timestamptz") == moments


def test_an_empty_array_is_sent_as_an_empty_array_of_its_type(connection):
    assert connection.execute("SELECT %b::uuid[] = '{}'::uuid[]", [UUIDArray()]).fetchone()[0] is True
    assert round_trip(connection, TextArray(), "text") == []


def test_an_aware_time_in_another_offset_is_the_same_instant(connection):
    in_athens = datetime(2026, 3, 1, 12, 0, tzinfo=timezone(timedelta(hours=2)))
    assert round_trip(connection, TimestamptzArray([in_athens]), "timestamptz") == [
        datetime(2026, 3, 1, 10, 0, tzinfo=UTC)
    ]


def test_rows_become_one_array_per_column():
    partners, codes = columns([("a", 1), ("b", 2)], TextArray, Int8Array)
    assert (type(partners), partners, type(codes), codes) == (TextArray, ["a", "b"], Int8Array, [1, 2])
    assert columns([], TextArray, Int8Array) == [[], []]


@settings(max_examples=60, deadline=None)
@given(
    texts=st.lists(st.none() | STORABLE_TEXT, max_size=20),
    blobs=st.lists(st.none() | st.binary(max_size=64), max_size=20),
    numbers=st.lists(st.none() | st.integers(-(2**63), 2**63 - 1), max_size=20),
)
def test_any_storable_values_come_back_unchanged(connection, texts, blobs, numbers):
    row = connection.execute(
        "SELECT %b::text[], %b::bytea[], %b::int8[]",
        [TextArray(texts), ByteaArray(blobs), Int8Array(numbers)],
    ).fetchone()
    assert row == (texts, blobs, numbers)
