"""How the domain's value objects are stored in events: each frozen dataclass as a dict of its fields.

`VALUE_OBJECTS` is the one list of them (with their free-form fields): the library's JSON transcoder gets a
`DataclassAsDict` for each (the first stored format, still read), and the msgspec mapper
(`application.store.msgspec_mapper`, the format written now) decodes exactly these into their classes.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from eventsourcing.persistence import JSONTranscoder, Transcoding

from domain.pricing import Fees, Quote
from domain.transaction import ChainPayment, Order

# value object -> its fields that hold partners' own string dictionaries
VALUE_OBJECTS: dict[type, tuple[str, ...]] = {Fees: (), Quote: (), ChainPayment: (), Order: ("data",)}


class DataclassAsDict(Transcoding):
    """Stores a frozen dataclass as its fields; nested values are transcoded by their own rules.

    Fields named in `free_form` hold partners' own string dictionaries; they are stored as lists of
    pairs, because a partner's keys could otherwise look like the transcoder's own tags (`_type_`).
    """

    def __init__(self, cls: type, free_form: tuple[str, ...] = ()) -> None:
        self.type = cls
        self.name = cls.__name__
        self.free_form = free_form

    def encode(self, obj: Any) -> dict[str, Any]:
        fields = {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)}
        for name in self.free_form:
            fields[name] = [[key, value] for key, value in fields[name].items()]
        return fields

    def decode(self, data: dict[str, Any]) -> Any:
        for name in self.free_form:
            data[name] = {key: value for key, value in data[name]}
        return self.type(**data)


def register_value_objects(transcoder: JSONTranscoder) -> None:
    for cls, free_form in VALUE_OBJECTS.items():
        transcoder.register(DataclassAsDict(cls, free_form=free_form))
