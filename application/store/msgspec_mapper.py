"""The ledger's events as msgspec JSON: encoded by msgspec, each decoded straight into its typed fields.

The stored event keeps the library's format (table, topic, originator id and version, `state` as UTF-8
JSON); only the JSON in `state` has two formats, told apart by its first bytes:

1. The library's `JSONTranscoder` (every event stored before this module, and still written for what format 2
   cannot hold, below): values tagged `{"_type_": "decimal_str", "_data_": "0.10"}`, value objects as
   `{"_type_": "Order", "_data_": {...}}`, a partner's free-form dictionary as a list of pairs. Read by the
   library's transcoder with the ledger's transcodings (`LedgerLog.register_transcodings`), exactly as before.
2. This module's: `{"_v_":2,"timestamp":"2026-03-01T10:00:00.123456Z","order":{"partner":...},...}`. The
   reserved key `_v_` is always the first, then the event's fields in the library's order (`class_version`
   last, when above 1; the event's actor, `_by_`, an object of text, after its fields when it has one:
   `application.store.actors`). Plain JSON without tags: a Decimal is the string `str()` gives ("0.10",
   "1E+2"), a datetime RFC 3339 with its UTC offset (`Z` for UTC), a UUID the hyphenated string, a value
   object of `transcodings.VALUE_OBJECTS` an object of its fields, a free-form dictionary an object. What a
   value is comes from the event class's annotations (`typing.get_type_hints`), never from the JSON, so no
   text and no key a customer or partner sends can be read as anything but text.

Rules:
- Detection: the state (after the cipher and the compressor, when configured) starts with the bytes
  `{"_v_":2` followed by `,` or `}`. Format 1 never starts so: the library writes an event's fields in order
  (`timestamp` first, every event has one), and what customers send is never a top-level key. Any other
  state is decoded by the library's transcoder, unchanged.
- Which classes: those whose fields are all str, int, bool, Decimal, datetime, UUID, None, unions of these,
  `list[...]`, `dict[str, ...]` or a value object of `VALUE_OBJECTS` (whose fields follow the same rule).
  Other classes, such as snapshots (their `state` is `dict[str, Any]`), stay in format 1.
- Written only if it reads back: the encoder decodes its bytes once and compares them with the event's
  fields. Anything that would not come back equal (a datetime with seconds in its UTC offset, which RFC 3339
  cannot say; a value not of its annotated type) is written in format 1 instead, so every stored event
  decodes.
- Class versions: a `class_version` above 1 is stored as the library stores it. A format-2 event of such a
  class is decoded to plain JSON values, its `upcast_vN_vM` methods run on those (strings for Decimals,
  datetimes and UUIDs, dicts for value objects), then it is converted to the current types; format-1 events
  are upcast on decoded values by the library's rule.
- Selection: `LedgerLog.env` names `EventCodecMapper` as the default `MAPPER_TOPIC`, so every `LedgerLog`
  and `Ledger` reads and writes with it. Format-2 events need this mapper: the library's plain `Mapper`
  would read them as untyped JSON.
- The audit chain hashes the stored bytes: events stored before keep their bytes and hashes. Encoding an
  event again now gives format-2 bytes (the chain never encodes again).
- SQL on `convert_from(state, 'UTF8')::jsonb`: format 2 has no `_data_` levels, e.g.
  `state #>> '{order,customer_code}'` and `(state #>> '{order,quote,price}')::numeric`; format 1 needs
  `state #>> '{order,_data_,customer_code}'`; `coalesce` of both reads a store that holds both.
"""

from __future__ import annotations

import dataclasses
import functools
from datetime import datetime
from decimal import Decimal
from types import UnionType
from typing import Any, NotRequired, TypedDict, Union, get_args, get_origin, get_type_hints
from uuid import UUID

import msgspec
from eventsourcing.domain import DomainEventProtocol
from eventsourcing.persistence import Mapper, MapperDeserialisationError, StoredEvent, find_id_convertor
from eventsourcing.utils import get_topic, resolve_topic

from application.store.actors import ACTOR_KEY
from application.store.transcodings import VALUE_OBJECTS

FORMAT_MARKER = b'{"_v_":2'
MARKER_KEY = "_v_"
FORMAT = 2
_AFTER_MARKER = (b",", b"}")
_IDS = ("originator_id", "originator_version")
_SCALARS = frozenset({str, int, bool, Decimal, datetime, UUID, type(None)})
_ENCODER = msgspec.json.Encoder()
_NOT_EXACT = (TypeError, ValueError, msgspec.MsgspecError)


def is_format_2(state: bytes) -> bool:
    """Whether a (plain) state was written by this module: the marker is its first key."""
    return state.startswith(FORMAT_MARKER) and state[8:9] in _AFTER_MARKER


def _exact(hint: Any) -> bool:
    """Whether values of this annotation decode exactly, without a tag."""
    if hint in _SCALARS:
        return True
    origin, args = get_origin(hint), get_args(hint)
    if origin is Union or origin is UnionType:
        return all(_exact(arg) for arg in args)
    if origin is list:
        return _exact(args[0])
    if origin is dict:
        return args[0] is str and _exact(args[1])
    if hint in VALUE_OBJECTS:
        return all(_exact(field) for field in get_type_hints(hint).values())
    return False


class EventCodec:
    """Format 2 of one event class: the decoder of its typed fields, and the encoder that checks itself."""

    def __init__(self, cls: type, fields: dict[str, Any]) -> None:
        self.cls = cls
        self.class_version: int = getattr(cls, "class_version", 1)
        name = cls.__qualname__.replace(".", "")
        fields = {**fields, ACTOR_KEY: NotRequired[dict[str, str]]}  # who caused it (`actors`)
        self.fields_type = TypedDict(f"{name}Fields", fields)  # type: ignore[misc]
        marked = TypedDict(f"{name}Stored", {MARKER_KEY: int, **fields})  # type: ignore[misc]
        self.decoder = msgspec.json.Decoder(marked)

    def encode(self, fields: dict[str, Any]) -> bytes | None:
        """The event's fields (ids left out) in format 2, or None if they would not decode back equal."""
        marked = {MARKER_KEY: FORMAT, **fields}
        if self.class_version > 1:
            marked["class_version"] = self.class_version
        try:
            state = _ENCODER.encode(marked)
            exact = self.decode(state) == fields
        except _NOT_EXACT:
            return None
        return state if exact else None

    def decode(self, state: bytes) -> dict[str, Any]:
        """The event's fields (ids left out) of a format-2 state, upcast to the class's version."""
        if self.class_version == 1:
            fields = self.decoder.decode(state)
            del fields[MARKER_KEY]
            return fields
        raw = msgspec.json.decode(state)
        del raw[MARKER_KEY]
        _upcast(self.cls, raw)
        return msgspec.convert(raw, self.fields_type)


@functools.cache
def codec_for(cls: type) -> EventCodec | None:
    """The format-2 codec of an event class, or None if its fields are not all exactly decodable."""
    if not dataclasses.is_dataclass(cls):
        return None
    try:
        hints = get_type_hints(cls)
    except (NameError, TypeError):
        return None
    fields: dict[str, Any] = {}
    for field in dataclasses.fields(cls):
        if field.name in _IDS:
            continue
        hint = hints.get(field.name)
        if field.name in (MARKER_KEY, ACTOR_KEY, "class_version") or hint is None or not _exact(hint):
            return None
        required = field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING
        fields[field.name] = hint if required else NotRequired[hint]
    try:
        return EventCodec(cls, fields)
    except TypeError:  # a union msgspec cannot tell apart (say, Decimal | str)
        return None


def _upcast(cls: type, state: dict[str, Any]) -> None:
    """The library's rule: `upcast_vN_vM` from the stored `class_version` (1 if absent) to the class's."""
    class_version = getattr(cls, "class_version", 1)
    from_version = state.pop("class_version", 1)
    while from_version < class_version:
        getattr(cls, f"upcast_v{from_version}_v{from_version + 1}")(state)
        from_version += 1


def _plain(mapper: Mapper[Any], state: bytes) -> bytes:
    if mapper.cipher:
        state = mapper.cipher.decrypt(state)
    if mapper.compressor:
        state = mapper.compressor.decompress(state)
    return state


def _typed_fields(cls: type, plain: bytes) -> dict[str, Any]:
    codec = codec_for(cls)
    if codec is None:
        raise TypeError(f"{get_topic(cls)} has no format-2 fields, yet its state is in format 2")
    return codec.decode(plain)


def decode_state(mapper: Mapper[Any], topic: str, state: bytes) -> dict[str, Any]:
    """A stored state's fields as decoded values, whichever format holds them, without ids or upcasting of
    format 1 (the library's `mapper.transcoder.decode`, which reads format 1 only): for `audit export`."""
    plain = _plain(mapper, state)
    if is_format_2(plain):
        return _typed_fields(resolve_topic(topic), plain)
    return mapper.transcoder.decode(plain)


class EventCodecMapper(Mapper[UUID]):
    """The library's mapper, writing format 2 where it can and reading both (see the module's docstring).
    Its `transcoder` is the library's JSON transcoder with the ledger's transcodings: format 1."""

    def to_stored_event(self, domain_event: DomainEventProtocol[UUID]) -> StoredEvent:
        cls = type(domain_event)
        codec = codec_for(cls)
        if codec is None:
            return super().to_stored_event(domain_event)
        fields = dict(vars(domain_event))
        originator_id = fields.pop("originator_id")
        originator_version = fields.pop("originator_version")
        state = codec.encode(fields)
        if state is None:
            return super().to_stored_event(domain_event)
        if self.compressor:
            state = self.compressor.compress(state)
        if self.cipher:
            state = self.cipher.encrypt(state)
        return StoredEvent(originator_id, originator_version, get_topic(cls), state)

    def to_domain_event(self, stored_event: StoredEvent) -> DomainEventProtocol[UUID]:
        cls = resolve_topic(stored_event.topic)
        try:
            plain = _plain(self, stored_event.state)
            typed = is_format_2(plain)
            state: dict[str, Any] = _typed_fields(cls, plain) if typed else self.transcoder.decode(plain)
        except Exception as error:
            raise MapperDeserialisationError(
                f"Failed to deserialise state of stored event with topic '{stored_event.topic}', "
                f"originator_id '{stored_event.originator_id}' and originator_version "
                f"{stored_event.originator_version}: {error}"
            ) from error
        state["originator_id"] = find_id_convertor(cls, type(stored_event.originator_id))(
            stored_event.originator_id
        )
        state["originator_version"] = stored_event.originator_version
        if not typed:
            _upcast(cls, state)
        domain_event = object.__new__(cls)
        object.__setattr__(domain_event, "__dict__", state)
        return domain_event
