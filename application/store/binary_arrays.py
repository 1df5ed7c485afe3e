"""Arrays sent to PostgreSQL in its binary format, built in one pass.

psycopg dumps a Python list as an array by finding the type of its items, choosing a dumper for them and
dumping each item, in Python, on every execution: for the four arrays of a group-committed batch and the
arrays of the rows written with it, about a third of the committer's time per transaction (`cProfile` of
`commit_batch`, one save per batch). The statements that send arrays of one known type wrap them in these
classes, whose dumpers write PostgreSQL's binary array format (`array_send`: dimensions, element type, each
element's length and bytes) directly.

Send them as binary parameters (`%b`, or `binary=True`); the text format is not provided. NULL items are
allowed in each of them.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any, ClassVar
from uuid import UUID

import psycopg
from psycopg.adapt import Dumper
from psycopg.pq import Format

_HEADER = struct.Struct("!iiIii")  # dimensions, has NULLs, element oid, length, lower bound
_EMPTY = struct.Struct("!iiI")
_LENGTH = struct.Struct("!i")
_INT8 = struct.Struct("!iq")  # an element's length (8) and its value
_NULL = _LENGTH.pack(-1)
_POSTGRES_EPOCH = datetime(2000, 1, 1, tzinfo=UTC)


class BinaryArray(list):
    """A list sent as a one-dimensional PostgreSQL array of `element_oid`, each item as `element` gives
    its binary value."""

    element_oid: ClassVar[int]
    array_oid: ClassVar[int]

    @staticmethod
    def element(item: Any) -> bytes:
        raise NotImplementedError

    def binary(self) -> bytes:
        if not self:
            return _EMPTY.pack(0, 0, self.element_oid)
        has_null = None in self
        parts = [_HEADER.pack(1, 1 if has_null else 0, self.element_oid, len(self), 1)]
        element = self.element
        length = _LENGTH.pack
        for item in self:
            if item is None:
                parts.append(_NULL)
            else:
                value = element(item)
                parts.append(length(len(value)))
                parts.append(value)
        return b"".join(parts)


class UUIDArray(BinaryArray):
    element_oid, array_oid = 2950, 2951

    @staticmethod
    def element(item: UUID) -> bytes:
        return item.bytes


class TextArray(BinaryArray):
    element_oid, array_oid = 25, 1009

    @staticmethod
    def element(item: str) -> bytes:
        return item.encode()


class ByteaArray(BinaryArray):
    element_oid, array_oid = 17, 1001

    @staticmethod
    def element(item: bytes) -> bytes:
        return bytes(item)


class Int8Array(BinaryArray):
    element_oid, array_oid = 20, 1016

    def binary(self) -> bytes:  # fixed width: one pack for each element's length and value
        if not self or None in self:
            return super().binary()
        pack = _INT8.pack
        return _HEADER.pack(1, 0, self.element_oid, len(self), 1) + b"".join(pack(8, item) for item in self)

    @staticmethod
    def element(item: int) -> bytes:
        return item.to_bytes(8, "big", signed=True)


class Int4Array(BinaryArray):
    element_oid, array_oid = 23, 1007

    @staticmethod
    def element(item: int) -> bytes:
        return item.to_bytes(4, "big", signed=True)


class TimestamptzArray(BinaryArray):
    """Aware datetimes, as microseconds since 2000-01-01 UTC (PostgreSQL's binary timestamptz)."""

    element_oid, array_oid = 1184, 1185

    @staticmethod
    def element(item: datetime) -> bytes:
        delta = item - _POSTGRES_EPOCH
        micros = (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
        return micros.to_bytes(8, "big", signed=True)


def _dumper_of(array: type[BinaryArray]) -> type[Dumper]:
    class ArrayDumper(Dumper):
        format = Format.BINARY
        oid = array.array_oid

        def dump(self, obj: BinaryArray) -> bytes:
            return obj.binary()

    ArrayDumper.__name__ = f"{array.__name__}Dumper"
    return ArrayDumper


ARRAYS = (UUIDArray, TextArray, ByteaArray, Int8Array, Int4Array, TimestamptzArray)
for _array in ARRAYS:  # for every connection made from now on
    psycopg.adapters.register_dumper(_array, _dumper_of(_array))


def columns(rows: Iterable[tuple[Any, ...]], *arrays: type[BinaryArray]) -> list[BinaryArray]:
    """Rows turned into one array per column, the column's values wrapped in its array class."""
    listed = list(rows)
    if not listed:
        return [array() for array in arrays]
    return [array(column) for array, column in zip(arrays, zip(*listed, strict=True), strict=True)]
