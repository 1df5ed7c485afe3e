"""How the domain's value objects are stored in events: each frozen dataclass as a dict of its fields."""

from __future__ import annotations

import dataclasses
from typing import Any

from eventsourcing.persistence import JSONTranscoder, Transcoding

from domain.pricing import Fees, Quote
from domain.transaction import ChainPayment, Order


class DataclassAsDict(Transcoding):
    """Stores a frozen dataclass as its fields; nested values are transcoded by their own rules."""

    def __init__(self, cls: type) -> None:
        self.type = cls
        self.name = cls.__name__

    def encode(self, obj: Any) -> dict[str, Any]:
        return {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)}

    def decode(self, data: dict[str, Any]) -> Any:
        return self.type(**data)


VALUE_OBJECTS = (Fees, Quote, Order, ChainPayment)


def register_value_objects(transcoder: JSONTranscoder) -> None:
    for cls in VALUE_OBJECTS:
        transcoder.register(DataclassAsDict(cls))
