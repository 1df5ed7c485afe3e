"""JSON request bodies decoded straight into the handler's Struct: exact, strict, amounts as numbers only.

Litestar's default path decodes a body to Python builtins first (amounts become floats, losing digits) and
then converts it leniently ("5" passes for an integer, "1.5" for an amount). Here numbers with a fraction or
exponent are decoded as `Decimal` from their text, types are checked strictly, and an amount given as a
string is refused, as the API document says.

Every problem of a body is listed, one line per field: unknown, missing and mistyped fields, and for a
buy, a sell, a new customer, a deposit report or a reserve adjustment, what the fields that could be read
say wrong (`interface.http.body_checks`).

Before the schema, a body must be sent as `application/json` (415 otherwise), nest at most 32 deep (400,
checked on the raw bytes before anything walks it), name each key of an object once (422 `duplicate_key`:
which of two values was meant cannot be known) and hold only text the ledger can store (422
`text_not_storable`, see `interface.http.text`). Its numbers are bounded as they are read, and one out of the
bounds where a number is declared is a problem of its field (`interface.http.json_bounds`).

What a JSON request body may hold, checked before anything walks it or computes with it.

- **Nesting**: arrays and objects at most MAX_NESTING deep, counted on the raw bytes in one pass with the
  strings left out, before the body is decoded; deeper is 400 `malformed_request`. No body of this API nests
  more than three levels, and the walks that follow (the decoder, the duplicate-key scan, the storable-text
  check, the schema) then never go deep.
- **Numbers**: the decoders read every number with a fraction or an exponent through `read_number`, and an
  integer too long for msgspec through `read_integer`. A number outside `domain.money`'s bounds
  (`within_bounds`: digits before and after the point as written) becomes OUT_OF_BOUNDS, a NaN, which no JSON
  text can spell: no huge number is ever built, written out or rounded. Where the body declares a number (an
  amount, an integer), `number_problem` refuses such a number, and an integer out of the bounds, naming the
  field and the bounds, never quoting what was sent."""

from __future__ import annotations

import decimal
import functools
import itertools
import json
import re
from decimal import Decimal
from typing import Any, ClassVar

import anyio
import msgspec
from litestar import Request
from litestar.exceptions import ClientException, ValidationException

from domain.money import DIGITS_BEFORE_POINT, NUMBER_BOUNDS, within_bounds
from interface.http.body_checks import BodyChecks
from interface.http.problems import RequestRefused
from interface.http.shapes import documented_patterns
from interface.http.text import refuse_unstorable_body

# --- what a body may hold: its nesting and its numbers ---

MAX_NESTING = 32
OUT_OF_BOUNDS = Decimal("NaN")
# A JSON string, or what starts as one and is cut off (then to the end of the body, a last lone backslash
# included): a string once begun always matches, possessively, so no later quote is tried again as its start,
# and the pass is linear in the body's length (`"\"\"\"...` without its last quote took quadratic time).
JSON_STRING = re.compile(rb'"[^"\\]*+(?:\\.[^"\\]*+)*+(?:"|\\?\Z)', re.DOTALL)
NOT_A_BRACKET = bytes(sorted(set(range(256)) - set(b"[]{}")))
NESTING_STEP = {ord("["): 1, ord("{"): 1, ord("]"): -1, ord("}"): -1}


def refuse_deep_nesting(body: bytes) -> None:
    """400 for a body whose arrays and objects nest deeper than MAX_NESTING."""
    if body.count(b"[") + body.count(b"{") <= MAX_NESTING:
        return  # it cannot nest deeper than it has brackets
    depth = nesting_depth(body)
    if depth > MAX_NESTING:
        raise RequestRefused(
            400,
            "malformed_request",
            f"the request body nests arrays and objects {depth} levels deep; at most {MAX_NESTING} are read",
        )


def nesting_depth(body: bytes) -> int:
    """How deep the arrays and objects of a JSON text nest (brackets inside strings do not count): the
    highest running count of opening less closing brackets, in one pass over the brackets alone."""
    brackets = JSON_STRING.sub(b"", body).translate(None, NOT_A_BRACKET)
    return max(itertools.accumulate(map(NESTING_STEP.__getitem__, brackets)), default=0)


def read_number(text: str) -> Decimal:
    """A JSON number with a fraction or an exponent, exactly as written, or OUT_OF_BOUNDS. Reading its
    digits costs what reading the body does (a Decimal holds them as written, its exponent apart); only
    rounding or writing one out could cost more."""
    try:
        number = Decimal(text)
    except decimal.InvalidOperation:  # an exponent beyond what a Decimal can hold
        return OUT_OF_BOUNDS
    return number if within_bounds(number) else OUT_OF_BOUNDS


def read_integer(text: str) -> int | Decimal:
    """A JSON integer read by Python's decoder (whose own conversion refuses over 4300 digits), or
    OUT_OF_BOUNDS."""
    return int(text) if len(text.lstrip("-")) <= DIGITS_BEFORE_POINT else OUT_OF_BOUNDS


def number_problem(value: Any, where: str) -> str | None:
    """Where the body declares a number: the problem of a number outside the bounds, else None."""
    if isinstance(value, bool) or not isinstance(value, int | Decimal) or within_bounds(value):
        return None
    return f"Expected a number with {NUMBER_BOUNDS} - at `{where}`"


# --- a body decoded into its Struct ---

EXACT_JSON = msgspec.json.Decoder(float_hook=read_number)
JSON_MEDIA_TYPE = "application/json"


class StrictJsonRequest(Request):
    """A request whose JSON body is decoded strictly into its Struct; a body that breaks its schema is
    refused with the problems `body_checks` find too (none in this class: the app's is `checked_by()`)."""

    body_checks: ClassVar[BodyChecks | None] = None

    @classmethod
    def checked_by(cls, checks: BodyChecks) -> type[StrictJsonRequest]:
        """The request class of an app whose bodies' content is checked by `checks`."""
        return type(cls.__name__, (cls,), {"body_checks": checks, "__module__": cls.__module__})

    async def json(self) -> Any:
        field = self.route_handler.parsed_data_field
        if field is None:
            return await super().json()
        body = await self.body()
        if body:
            check_media_type(self.headers.get("content-type"))
        try:
            return decode_body(body, field.annotation)
        except BodyInvalid as invalid:
            raise await self._with_content_problems(invalid, field.annotation) from None

    async def _with_content_problems(self, invalid: BodyInvalid, target: Any) -> BodyInvalid:
        """The schema's problems and those the content checks find in the fields that could be read, in
        one refusal (the checks may resolve a callback URL's host or read an account: off the event loop)."""
        checks = self.body_checks
        user = self.scope.get("user")
        if checks is None or user is None or invalid.readable is None:
            return invalid
        found = await anyio.to_thread.run_sync(
            checks.problems, target, user.partner, invalid.readable, invalid.unread
        )
        return BodyInvalid([*invalid.problems, *found]) if found else invalid


class BodyInvalid(ValidationException):
    """A body that breaks its schema: every problem, one line each; the fields that could be read
    (`readable`, by the client's names, converted; None when the body is not an object of fields) and the
    names of those that could not (`unread`: sent in a form the schema refuses, or required and left out)."""

    def __init__(
        self,
        problems: list[str],
        readable: dict[str, Any] | None = None,
        unread: frozenset[str] = frozenset(),
    ) -> None:
        extra = [{"message": problem, "source": "body"} for problem in problems]
        super().__init__("; ".join(problems), extra=extra)
        self.problems = problems
        self.readable = readable
        self.unread = unread


def check_media_type(content_type: str | None) -> None:
    """A JSON body must say so: `application/json`, with a UTF-8 charset parameter or none."""
    media_type, _, parameters = (content_type or "").partition(";")
    charset = next(
        (
            value.strip().strip('"').lower()
            for name, _, value in (part.partition("=") for part in parameters.split(";"))
            if name.strip().lower() == "charset"
        ),
        "utf-8",
    )
    if media_type.strip().lower() != JSON_MEDIA_TYPE or charset not in ("utf-8", "utf8"):
        given = content_type or "no Content-Type"
        raise RequestRefused(
            415,
            "unsupported_media_type",
            f"send the body as JSON with Content-Type: application/json (charset utf-8 if any); got {given}",
        )


def decode_body(body: bytes, target: Any) -> Any:
    refuse_deep_nesting(body)
    raw = _decode_json(body or b"null")
    _refuse_duplicate_keys(body)
    refuse_unstorable_body(raw)
    if isinstance(raw, dict) and isinstance(target, type) and issubclass(target, msgspec.Struct):
        raw, problems, readable, unread = _read_fields(raw, target)
    else:
        problems, readable, unread = [], None, frozenset()
        raw = _as_declared(raw, _type_info(target), "$", problems)
    if not problems:
        try:
            return msgspec.convert(raw, target, strict=True)
        except msgspec.ValidationError as error:
            problems.append(documented_patterns(str(error)))
    raise BodyInvalid(problems, readable, unread)


def _read_fields(
    raw: dict[str, Any], target: type[msgspec.Struct]
) -> tuple[dict[str, Any], list[str], dict[str, Any], frozenset[str]]:
    """Every problem of a body's top-level fields, one line per field, named as the client sent it (msgspec
    stops at the first): unknown fields, missing required ones, and each field that is not what it must
    be. With the body as declared (see `_as_declared`), the fields that are what they must be (converted)
    and the names of those that are not."""
    declared_types, fields = _fields_of(target)
    problems = [f"Object contains unknown field `{name}`" for name in raw if name not in fields]
    declared, readable, unread = dict(raw), {}, set()
    for name, field in fields.items():
        if name not in raw:
            if field.required:
                problems.append(f"Object missing required field `{name}`")
                unread.add(name)
            continue
        own: list[str] = []
        declared[name] = _as_declared(raw[name], declared_types[name], f"$.{name}", own)
        if not own:
            try:
                readable[name] = msgspec.convert(declared[name], field.type, strict=True)
            except msgspec.ValidationError as error:
                own.append(_at_field(documented_patterns(str(error)), name))
        if own:
            problems.append(own[0])
            unread.add(name)
    return declared, problems, readable, frozenset(unread)


def _at_field(message: str, name: str) -> str:
    """msgspec's message for a value converted on its own, placed at the field: `... - at `$.name[0]``."""
    if " - at `$" in message:
        return message.replace(" - at `$", f" - at `$.{name}", 1)
    return f"{message} - at `$.{name}`"


def _decode_json(body: bytes) -> Any:
    try:
        return EXACT_JSON.decode(body)
    except msgspec.DecodeError as error:
        return _decode_what_msgspec_refuses(body, error)
    except UnicodeDecodeError as error:  # msgspec raises it for a string that is not UTF-8
        raise ClientException(f"the request body is not valid UTF-8: {error.reason}") from None


def _decode_what_msgspec_refuses(body: bytes, error: msgspec.DecodeError) -> Any:
    """JSON that msgspec refuses though it is JSON: a lone surrogate escaped (`"\\ud800"`), which it takes
    for cut-off text, and an integer of more digits than it converts (4300). Such a body is read again, with
    the same bounds on its numbers, so that the refusal names the field (422) rather than calling the JSON
    broken; a body Python's decoder refuses too is not JSON."""
    try:
        return json.loads(
            body.decode("utf-8"), parse_float=read_number, parse_int=read_integer, parse_constant=_no_constant
        )
    except ValueError:
        raise ClientException(f"the request body is not valid JSON: {error}") from None


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _refuse_duplicate_keys(body: bytes) -> None:
    duplicates: list[str] = []

    def collect(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                duplicates.append(key)
            seen.add(key)
        return {}

    if body and b'"' in body:
        json.loads(body, object_pairs_hook=collect, parse_float=str, parse_int=str)
    if duplicates:
        errors = [f"key {key!r} appears more than once in one object; send it once" for key in duplicates]
        raise RequestRefused(422, "duplicate_key", "; ".join(errors), errors=errors)


@functools.cache
def _fields_of(
    target: type[msgspec.Struct],
) -> tuple[dict[str, msgspec.inspect.Type], dict[str, msgspec.structs.FieldInfo]]:
    """A body struct's declared types and fields by the names clients send (worked out once per struct)."""
    declared_types = {field.encode_name: field.type for field in _type_info(target).fields}
    return declared_types, {field.encode_name: field for field in msgspec.structs.fields(target)}


@functools.cache
def _type_info(target: Any) -> msgspec.inspect.Type:
    """What msgspec knows of a body's declared type, worked out once per type (it costs a millisecond)."""
    return msgspec.inspect.type_info(target)


def _as_declared(value: Any, info: msgspec.inspect.Type, where: str, problems: list[str]) -> Any:
    """Refuses amounts (Decimal fields) given as strings, and numbers out of bounds where a number is
    declared; reads integral numbers written with a fraction or exponent (`2.0`, `1e3`) as integers where
    an integer is declared, as JSON Schema does."""
    if isinstance(info, msgspec.inspect.Metadata):
        info = info.type
    numeric = isinstance(info, msgspec.inspect.DecimalType | msgspec.inspect.IntType)
    if isinstance(info, msgspec.inspect.DecimalType) and isinstance(value, str):
        problems.append(f"Expected `number`, got `str` - at `{where}`")
    elif numeric and (out_of_bounds := number_problem(value, where)):
        problems.append(out_of_bounds)
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
