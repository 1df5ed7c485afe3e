"""The API document at /schema, made to say exactly what the service does.

Litestar builds the document from the routes; before it is served, this module corrects it in one place:
- bodies are described by msgspec's own JSON Schema of the Structs that decode and encode them (unknown
  fields refused, every constraint kept), with amounts as JSON numbers, as they are sent and read;
- what the settings decide (codes, amounts' scale) and the text rules are said too
  (`interface.api_document.settings`, `storable`), so a request valid by the document is one the service
  takes;
- every operation lists its problem responses with the `code` values each can carry (in the description
  and as `x-codes`): the shared machinery's it goes through (malformed request, token and role,
  idempotency, body size and validation, rate limit, database unavailable) and its own rules'
  (each feature's description, gathered by `interface.api_document.operation_problems`), with the headers
  they carry; a response the handler declares keeps its description;
- each operation's security requirement names the roles that may call it;
- parameters are never null (a header is absent or a string), and a body that may be null is optional;
- the query parameters an operation lists are all it takes, as litestar reads them from the same signatures:
  any other is refused (`interface.http.query_checks`; tests/interface/test_unknown_query_parameters.py
  holds the two equal);
- patterns are written for ECMA-262, as JSON Schema reads them (`ecma_patterns`).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

import msgspec
from litestar import Litestar, Request, Response, Router
from litestar.enums import MediaType
from litestar.openapi import OpenAPIConfig
from litestar.openapi.plugins import JsonRenderPlugin, ScalarRenderPlugin
from litestar.openapi.spec import Components, SecurityScheme

from application.settings import Settings
from interface.api_document.examples import add_examples, guide_examples
from interface.api_document.operation_problems import OperationProblems
from interface.api_document.settings import apply_settings_rules
from interface.http import shapes
from interface.http.problems import PROBLEM_JSON, TITLES, problem_response
from interface.http.rate_limits import EXEMPT_PATHS
from interface.http.shapes import ecma_pattern
from interface.shared.feature import Feature

REF = "#/components/schemas/{name}"
STORABLE_TEXT = r"^[^\u0000\ud800-\udfff]*$"  # text the ledger can store (interface.http.text)
HEADERS_OF_STATUS = {
    401: {"WWW-Authenticate": "the authentication scheme to use"},
    429: {"Retry-After": "seconds to wait before trying again"},
    503: {"Retry-After": "seconds to wait before trying again"},
}
# Headers of every answer (docs/api.md, "Request ids and rate-limit fields"); those of an operation the rate
# limit counts are absent from an answer refused before it counted the request (a bad token, say)
ANSWER_HEADERS = {
    "X-Request-Id": {
        "description": "the request's id: the X-Request-Id it was sent with when well formed "
        "(1 to 128 of A-Z a-z 0-9 _ . : -), else a new one; problem bodies name it in requestId",
        "required": True,
        "schema": {"type": "string", "pattern": "^[A-Za-z0-9_.:-]{1,128}$"},
    }
}
LIMITED_ANSWER_HEADERS = {
    "RateLimit-Policy": {
        "description": 'the client\'s rate limit: `"default";q=<burst>;w=<seconds the bucket takes to fill>`',
        "required": False,
        "schema": {"type": "string"},
    },
    "RateLimit": {
        "description": 'where the client stands after this request: `"default";r=<requests left now>;'
        "t=<seconds until the whole quota is back>`",
        "required": False,
        "schema": {"type": "string"},
    },
}


# The `code` values of the refusals the shared machinery gives, by status, and what an operation must be
# for it to give them (`interface.api_document.operation_problems` adds each operation's own)
SHARED_CODES = {
    400: [
        ("malformed_request", "any"),
        ("api_version_missing", "versioned"),
        ("api_version_unsupported", "versioned"),
        ("api_version_repeated", "versioned"),
        ("text_not_storable", "any"),
        ("idempotency_key_invalid", "keyed"),
    ],
    401: [("unauthorized", "secured")],
    403: [("forbidden", "secured")],
    409: [("idempotency_request_in_progress", "keyed")],
    413: [("request_too_large", "body")],
    415: [("unsupported_media_type", "body")],
    422: [
        ("validation_failed", "body"),
        ("duplicate_key", "body"),
        ("text_not_storable", "body"),
        ("idempotency_key_reused", "keyed"),
    ],
    429: [("rate_limited", "limited")],
    503: [("database_unavailable", "database"), ("concurrent_update", "keyed")],
}


def openapi_config(features: Sequence[Feature], settings: Settings) -> OpenAPIConfig:
    """The document of the app that serves `features`: their shapes and their operations' refusals, and
    what `settings` decide."""
    return OpenAPIConfig(
        title="Broker Ledger",
        version="1.2",
        description="Buy and sell crypto-currency for fiat on behalf of a broker platform's customers.",
        path="/schema",
        components=Components(
            security_schemes={"bearer": SecurityScheme(type="http", scheme="bearer", bearer_format="JWT")}
        ),
        security=[{"bearer": []}],
        use_handler_docstrings=True,
        render_plugins=[ScalarRenderPlugin(), LedgerDocument(features, settings)],
    )


class LedgerDocument(JsonRenderPlugin):
    """Serves the corrected document at /schema/openapi.json (built once per application)."""

    def __init__(self, features: Sequence[Feature], settings: Settings) -> None:
        super().__init__()
        self.features = features
        self.settings = settings
        self._rendered: bytes | None = None

    def render(self, request: Request, openapi_schema: dict[str, Any]) -> bytes:
        if self._rendered is None:
            document = corrected(openapi_schema, request.app, self.features, self.settings)
            self._rendered = self.render_json(request, document)
        return self._rendered

    def receive_router(self, router: Router) -> None:
        """Litestar answers an unknown path under /schema with an HTML page of its own; here it is a
        problem like every other 404."""
        super().receive_router(router)
        router.after_request = _problem_for_html_404


async def _problem_for_html_404(response: Response) -> Response:
    if response.status_code == 404 and response.media_type == MediaType.HTML:
        return problem_response(404, "not_found", "no such resource: check the path against the API document")
    return response


def corrected(
    document: dict[str, Any], app: Litestar, features: Sequence[Feature], settings: Settings
) -> dict[str, Any]:
    document = copy.deepcopy(document)
    schemas = document["components"]["schemas"]
    ours = struct_schemas(schema_modules(features))
    schemas.update({name: schema for name, schema in ours.items() if name in schemas})
    for schema in list(schemas.values()):  # the variants of an exactly-one-of body
        for option in schema.get("oneOf", []):
            name = option.get("$ref", "").rpartition("/")[2]
            if name in ours:
                schemas[name] = ours[name]
    apply_settings_rules(schemas, settings)
    for name in _request_components(document):
        schemas[name] = storable(schemas[name])
    roles = roles_by_operation(app)
    problems = OperationProblems.of(features)
    for path, operations in document["paths"].items():
        limited = not path.startswith(EXEMPT_PATHS)
        for operation in operations.values():
            _correct_operation(operation, roles.get(operation.get("operationId")), limited, problems)
    add_examples(document, guide_examples())
    return ecma_patterns(document)


def struct_schemas(modules: Sequence[ModuleType]) -> dict[str, Any]:
    """msgspec's JSON Schema of every request and response Struct of `modules`, amounts as numbers."""
    structs = [
        value
        for module in modules
        for value in vars(module).values()
        if isinstance(value, type)
        and issubclass(value, msgspec.Struct)
        and value.__module__ == module.__name__
    ]
    _, components = msgspec.json.schema_components(structs, ref_template=REF)
    for module in modules:
        for name, rules in getattr(module, "SCHEMA_RULES", {}).items():
            components[name] = {**components[name], **rules}
        for name, fields in getattr(module, "EXACTLY_ONE_OF", {}).items():
            components.update(_exactly_one_of(name, components[name], fields))
    return _numbers_for_decimals(components)


def _exactly_one_of(name: str, schema: dict[str, Any], fields: tuple[str, ...]) -> dict[str, Any]:
    """`name` as a oneOf of one schema per field: that field required and not null, the others null or
    absent (`BrokerSell` is `BrokerSellByFiatValue` or `BrokerSellByCryptoAmount`)."""
    variants = {}
    for field in fields:
        properties = dict(schema["properties"])
        properties[field] = _not_null(properties[field])
        properties[field] = {k: v for k, v in properties[field].items() if k != "default"}
        for other in fields:
            if other != field:
                properties[other] = {"type": "null"}
        variant = f"{name}By{field[0].upper()}{field[1:]}"
        variants[variant] = {
            **schema,
            "title": variant,
            "properties": properties,
            "required": sorted({*schema.get("required", []), field}),
        }
    one_of = {
        "title": name,
        "description": f"{schema.get('description', '')} Give exactly one of {' and '.join(fields)}.".strip(),
        "oneOf": [{"$ref": REF.format(name=variant)} for variant in variants],
    }
    return {name: one_of, **variants}


def schema_modules(features: Sequence[Feature]) -> list[ModuleType]:
    """The shapes every body builds on (`interface.http.shapes`: a problem's body among them) and each
    feature's shapes modules, once each: every request and response Struct the app's routes name."""
    modules = [shapes, *(module for feature in features for module in feature.shapes)]
    return list(dict.fromkeys(modules))


def roles_by_operation(app: Litestar) -> dict[str, frozenset[str]]:
    return {
        handler.operation_id: handler.opt["roles"]
        for route in app.routes
        for handler in getattr(route, "route_handlers", [])
        if isinstance(handler.operation_id, str) and handler.opt.get("roles")
    }


def _correct_operation(
    operation: dict[str, Any], roles: frozenset[str] | None, limited: bool, problems: OperationProblems
) -> None:
    secured = operation.get("security") != [{}]
    if roles:
        operation["security"] = [{"bearer": [role]} for role in sorted(roles)]
    for parameter in operation.get("parameters", []):
        parameter["schema"] = storable(_not_null(parameter["schema"]))
    body = operation.get("requestBody")
    if body is not None and any(_allows_null(media["schema"]) for media in body["content"].values()):
        body["required"] = False
    documented = operation.setdefault("responses", {})
    declared = {  # problems the handler documents itself: its description stays
        status
        for status, response in documented.items()
        if PROBLEM_JSON in response.get("content", {}) and status.isdigit()
    }
    traits = {
        "any",
        *(["secured"] if secured else []),
        *(["body"] if body is not None else []),
        *(["limited"] if limited else []),
        *(["database"] if operation.get("operationId") not in problems.without_database else []),
        *(["keyed"] if _has_parameter(operation, "Idempotency-Key") else []),
        *(["versioned"] if _has_parameter(operation, "api_version") else []),
    }
    codes = operation_codes(operation.get("operationId", ""), traits, problems)
    for status in codes:
        # litestar documents its own 400 as application/json: every refusal is a problem
        if PROBLEM_JSON not in documented.get(str(status), {}).get("content", {}):
            documented[str(status)] = _problem(status)
    for status, response in list(documented.items()):
        if PROBLEM_JSON in response.get("content", {}) and status.isdigit():
            given = codes.get(int(status), [])
            if not given and status not in declared:
                del documented[status]  # nothing of this operation answers so
                continue
            listed = ", ".join(f"`{code}`" for code in given)
            title = response["description"] if status in declared else TITLES.get(int(status), "Error")
            response["description"] = f"{title}; `code` is one of {listed}"
            response["x-codes"] = given
    for status, headers in HEADERS_OF_STATUS.items():
        if str(status) in documented:
            documented[str(status)]["headers"] = {
                name: {"description": text, "required": True, "schema": {"type": "string"}}
                for name, text in headers.items()
            }
    every_answer = {**ANSWER_HEADERS, **(LIMITED_ANSWER_HEADERS if limited else {})}
    for response in documented.values():
        response.setdefault("headers", {}).update(copy.deepcopy(every_answer))


def _problem(status: int) -> dict[str, Any]:
    return {
        "description": TITLES.get(status, "Error"),
        "content": {PROBLEM_JSON: {"schema": {"$ref": REF.format(name="Problem")}}},
    }


def _allows_null(schema: dict[str, Any]) -> bool:
    options = schema.get("oneOf", schema.get("anyOf", []))
    return schema.get("type") == "null" or any(option.get("type") == "null" for option in options)


def _not_null(schema: dict[str, Any]) -> dict[str, Any]:
    """`{"oneOf": [{"type": "string"}, {"type": "null"}], "maxLength": 9}` becomes
    `{"type": "string", "maxLength": 9}`."""
    key = "oneOf" if "oneOf" in schema else "anyOf"
    options = [option for option in schema.get(key, []) if option.get("type") != "null"]
    if len(options) != 1:
        return schema
    rest = {name: value for name, value in schema.items() if name != key}
    return {**options[0], **rest}


def _request_components(document: dict[str, Any]) -> set[str]:
    """The names of the schemas a request body refers to, directly or through another one."""
    schemas = document["components"]["schemas"]
    found: set[str] = set()
    pending = [
        media["schema"]
        for operations in document["paths"].values()
        for operation in operations.values()
        for media in operation.get("requestBody", {}).get("content", {}).values()
    ]
    while pending:
        item = pending.pop()
        if isinstance(item, list):
            pending.extend(item)
        elif isinstance(item, dict):
            name = item.get("$ref", "").rpartition("/")[2]
            if name in schemas and name not in found:
                found.add(name)
                pending.append(schemas[name])
            pending.extend(item.values())
    return found


def _rewritten(schema: Any, rewrite: Callable[[dict[str, Any]], dict[str, Any]]) -> Any:
    """`schema` with `rewrite` applied to each of its objects, innermost first (lists and other values as
    they are)."""
    if isinstance(schema, list):
        return [_rewritten(item, rewrite) for item in schema]
    if not isinstance(schema, dict):
        return schema
    return rewrite({key: _rewritten(value, rewrite) for key, value in schema.items()})


def storable(schema: Any) -> Any:
    """Free text (a string without enum, pattern or format, and every property name) said to hold no NUL
    and no lone surrogate, which the service refuses as `text_not_storable`."""
    return _rewritten(schema, _said_storable)


def _said_storable(schema: dict[str, Any]) -> dict[str, Any]:
    if "propertyNames" in schema and "pattern" not in schema["propertyNames"]:
        schema["propertyNames"] = {**schema["propertyNames"], "pattern": STORABLE_TEXT}
    if schema.get("type") == "string" and not {"enum", "pattern", "format", "const"} & set(schema):
        schema["pattern"] = STORABLE_TEXT
    return schema


def ecma_patterns(schema: Any) -> Any:
    """Every `pattern` as ECMA-262 writes it (`interface.http.shapes.ecma_pattern`): the service's end in
    Python's `\\Z`, the end of the text, where Python's `$` also matches before a final newline."""
    return _rewritten(schema, _ecma_pattern_of)


def _ecma_pattern_of(schema: dict[str, Any]) -> dict[str, Any]:
    pattern = schema.get("pattern")
    return {**schema, "pattern": ecma_pattern(pattern)} if isinstance(pattern, str) else schema


def _numbers_for_decimals(schema: Any) -> Any:
    """msgspec documents Decimal as a string; the service reads and writes amounts as JSON numbers."""
    return _rewritten(schema, _number_for_decimal)


def _number_for_decimal(schema: dict[str, Any]) -> dict[str, Any]:
    if schema.get("type") == "string" and schema.get("format") == "decimal":
        return {**{k: v for k, v in schema.items() if k != "format"}, "type": "number"}
    return schema


def operation_codes(operation_id: str, traits: set[str], problems: OperationProblems) -> dict[int, list[str]]:
    """Every `code` the operation can answer, by status: the shared machinery's it goes through (`traits`)
    and its own rules' (`problems`, from its feature's description)."""
    codes = {
        status: [code for code, needs in shared if needs in traits] for status, shared in SHARED_CODES.items()
    }
    for status, own in problems.domain_codes(operation_id).items():
        codes.setdefault(status, []).extend(code for code in own if code not in codes[status])
    return {status: listed for status, listed in codes.items() if listed}


def _has_parameter(operation: dict[str, Any], name: str) -> bool:
    return any(parameter["name"] == name for parameter in operation.get("parameters", []))
