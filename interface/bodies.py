"""JSON request bodies decoded straight into the handler's Struct: exact, strict, amounts as numbers only.

Litestar's default path decodes a body to Python builtins first (amounts become floats, losing digits) and
then converts it leniently ("5" passes for an integer, "1.5" for an amount). Here numbers with a fraction or
exponent are decoded as `Decimal` from their text, types are checked strictly, and an amount given as a
string is refused, as the API document says.
"""

from __future__ import annotations

import functools
from decimal import Decimal
from typing import Any

import msgspec
from litestar import Request
from litestar.exceptions import ClientException, ValidationException

EXACT_JSON = msgspec.json.Decoder(float_hook=Decimal)


class StrictJsonRequest(Request):
    async def json(self) -> Any:
        field = self.route_handler.parsed_data_field
        if field is None:
            return await super().json()
        return decode_body(await self.body(), field.annotation)


def decode_body(body: bytes, target: Any) -> Any:
    try:
        raw = EXACT_JSON.decode(body or b"null")
    except msgspec.DecodeError as error:
        raise ClientException(f"the request body is not valid JSON: {error}") from None
    except UnicodeDecodeError as error:  # msgspec raises it for a string that is not UTF-8
        raise ClientException(f"the request body is not valid UTF-8: {error.reason}") from None
    except RecursionError:  # nesting deeper than the decoder's stack allows
        raise ClientException("the request body is not valid JSON: it is nested too deeply") from None
    problems: list[str] = []
    raw = _as_declared(raw, _type_info(target), "$", problems)
    try:
        value = msgspec.convert(raw, target, strict=True)
    except msgspec.ValidationError as error:
        problems.append(str(error))
    if problems:
        raise ValidationException(
            "; ".join(problems), extra=[{"message": problem, "source": "body"} for problem in problems]
        )
    return value


@functools.cache
def _type_info(target: Any) -> msgspec.inspect.Type:
    """What msgspec knows of a body's declared type, worked out once per type (it costs a millisecond)."""
    return msgspec.inspect.type_info(target)


def _as_declared(value: Any, info: msgspec.inspect.Type, where: str, problems: list[str]) -> Any:
    """Refuses amounts (Decimal fields) given as strings; reads integral numbers written with a fraction or
    exponent (`2.0`, `1e3`) as integers where an integer is declared, as JSON Schema does."""
    if isinstance(info, msgspec.inspect.Metadata):
        info = info.type
    if isinstance(info, msgspec.inspect.DecimalType) and isinstance(value, str):
        problems.append(f"Expected `number`, got `str` - at `{where}`")
    elif isinstance(info, msgspec.inspect.IntType) and _is_small_integral(value):
        return int(value)
    elif isinstance(info, msgspec.inspect.UnionType):
        for option in info.types:
            value = _as_declared(value, option, where, problems)
    elif isinstance(info, msgspec.inspect.StructType) and isinstance(value, dict):
        fields = {field.encode_name: field.type for field in info.fields}
        return {
            name: _as_declared(item, fields[name], f"{where}.{name}", problems) if name in fields else item
            for name, item in value.items()
        }
    return value


def _is_small_integral(value: Any) -> bool:
    """A Decimal holding a whole number within 64 bits (bigger ones are refused by msgspec as they are)."""
    if not isinstance(value, Decimal) or not value.is_finite() or value.copy_abs() >= 2**63:
        return False
    return value == value.to_integral_value()
