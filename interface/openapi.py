"""The API document at /schema, made to say exactly what the service does.

Litestar builds the document from the routes; before it is served, this module corrects it in one place:
- bodies are described by msgspec's own JSON Schema of the Structs that decode and encode them (unknown
  fields refused, every constraint kept), with amounts as JSON numbers, as they are sent and read;
- every operation lists the problem responses the shared machinery can give (malformed request, token and
  role, idempotency, body size and validation, rate limit, database unavailable) with the headers they
  carry;
- each operation's security requirement names the roles that may call it;
- parameters are never null (a header is absent or a string), and a body that may be null is optional.
"""

from __future__ import annotations

import copy
import importlib
import pkgutil
from types import ModuleType
from typing import Any

import msgspec
from litestar import Litestar, Request, Response, Router
from litestar.enums import MediaType
from litestar.openapi import OpenAPIConfig
from litestar.openapi.plugins import JsonRenderPlugin, ScalarRenderPlugin
from litestar.openapi.spec import Components, SecurityScheme

from domain import errors
from interface import schemas
from interface.examples import add_examples, guide_examples
from interface.problems import PROBLEM_JSON, STATUS_OF_KIND, TITLES, problem_response
from interface.rate_limits import EXEMPT_PATHS

REF = "#/components/schemas/{name}"
HEADERS_OF_STATUS = {
    401: {"WWW-Authenticate": "the authentication scheme to use"},
    429: {"Retry-After": "seconds to wait before trying again"},
    503: {"Retry-After": "seconds to wait before trying again"},
}


# The `code` values of the refusals the interface itself gives, by status (the domain's are added by kind).
SHARED_CODES = {
    400: [
        "malformed_request",
        "api_version_missing",
        "api_version_unsupported",
        "api_version_repeated",
        "text_not_storable",
        "idempotency_key_invalid",
    ],
    401: ["unauthorized"],
    403: ["forbidden"],
    404: ["not_found"],
    409: ["idempotency_request_in_progress"],
    413: ["request_too_large"],
    415: ["unsupported_media_type"],
    422: ["validation_failed", "duplicate_key", "text_not_storable", "idempotency_key_reused"],
    429: ["rate_limited"],
    503: ["database_unavailable"],
}
IDEMPOTENCY_CODES = {"idempotency_key_invalid", "idempotency_request_in_progress", "idempotency_key_reused"}
CODES_OF_OPERATION = {
    "issueToken": {
        400: ["malformed_request", "invalid_request", "unsupported_grant_type", "invalid_scope"],
        401: ["invalid_client"],
        413: ["request_too_large"],
        415: ["unsupported_media_type"],
        422: ["validation_failed", "duplicate_key", "text_not_storable"],
        429: ["rate_limited", "too_many_failed_attempts", "secret_checks_busy"],
        503: ["database_unavailable"],
    }
}


def openapi_config() -> OpenAPIConfig:
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
        render_plugins=[ScalarRenderPlugin(), LedgerDocument()],
    )


class LedgerDocument(JsonRenderPlugin):
    """Serves the corrected document at /schema/openapi.json (built once per application)."""

    def __init__(self) -> None:
        super().__init__()
        self._rendered: bytes | None = None

    def render(self, request: Request, openapi_schema: dict[str, Any]) -> bytes:
        if self._rendered is None:
            self._rendered = self.render_json(request, corrected(openapi_schema, request.app))
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


def corrected(document: dict[str, Any], app: Litestar) -> dict[str, Any]:
    document = copy.deepcopy(document)
    schemas = document["components"]["schemas"]
    ours = struct_schemas()
    schemas.update({name: schema for name, schema in ours.items() if name in schemas})
    for schema in list(schemas.values()):  # the variants of an exactly-one-of body
        for option in schema.get("oneOf", []):
            name = option.get("$ref", "").rpartition("/")[2]
            if name in ours:
                schemas[name] = ours[name]
    roles = roles_by_operation(app)
    for path, operations in document["paths"].items():
        limited = not path.startswith(EXEMPT_PATHS)
        for method, operation in operations.items():
            _correct_operation(method, operation, roles.get(operation.get("operationId")), limited)
    add_examples(document, guide_examples())
    return document


def struct_schemas() -> dict[str, Any]:
    """msgspec's JSON Schema of every request and response Struct, amounts as numbers."""
    structs = [
        value
        for module in schema_modules()
        for value in vars(module).values()
        if isinstance(value, type)
        and issubclass(value, msgspec.Struct)
        and value.__module__ == module.__name__
    ]
    _, components = msgspec.json.schema_components(structs, ref_template=REF)
    for module in schema_modules():
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


def schema_modules() -> list[ModuleType]:
    """Every module of `interface.schemas`: each holds request or response Structs."""
    return [
        importlib.import_module(f"{schemas.__name__}.{info.name}")
        for info in pkgutil.iter_modules(schemas.__path__)
    ]


def roles_by_operation(app: Litestar) -> dict[str, frozenset[str]]:
    return {
        handler.operation_id: handler.opt["roles"]
        for route in app.routes
        for handler in getattr(route, "route_handlers", [])
        if isinstance(handler.operation_id, str) and handler.opt.get("roles")
    }


def _correct_operation(
    method: str, operation: dict[str, Any], roles: frozenset[str] | None, limited: bool
) -> None:
    secured = operation.get("security") != [{}]
    if roles:
        operation["security"] = [{"bearer": [role]} for role in sorted(roles)]
    for parameter in operation.get("parameters", []):
        parameter["schema"] = _not_null(parameter["schema"])
    body = operation.get("requestBody")
    if body is not None and any(_allows_null(media["schema"]) for media in body["content"].values()):
        body["required"] = False
    documented = operation.setdefault("responses", {})
    for status in _shared_refusals(method, secured, has_body=body is not None, limited=limited):
        # litestar documents its own 400 as application/json: every refusal is a problem
        if PROBLEM_JSON not in documented.get(str(status), {}).get("content", {}):
            documented[str(status)] = _problem(status)
    codes = CODES_OF_OPERATION.get(operation.get("operationId", ""), codes_by_status())
    keyed = any(parameter["name"] == "Idempotency-Key" for parameter in operation.get("parameters", []))
    for status, response in documented.items():
        if PROBLEM_JSON in response.get("content", {}) and status.isdigit():
            given = [code for code in codes.get(int(status), []) if keyed or code not in IDEMPOTENCY_CODES]
            listed = ", ".join(f"`{code}`" for code in given)
            response["description"] = f"{TITLES.get(int(status), 'Error')}; `code` is one of {listed}"
    for status, headers in HEADERS_OF_STATUS.items():
        if str(status) in documented:
            documented[str(status)]["headers"] = {
                name: {"description": text, "required": True, "schema": {"type": "string"}}
                for name, text in headers.items()
            }


def _shared_refusals(method: str, secured: bool, *, has_body: bool, limited: bool) -> set[int]:
    """What any route can answer, whatever it does: malformed request or header (400), database down
    (503); token (401) and role (403); body too large (413) or invalid (422); Idempotency-Key still running
    (409) or reused with another request (422); the client's rate limit (429) on every route but health."""
    statuses = {400, 503}
    if limited:
        statuses.add(429)
    if secured:
        statuses |= {401, 403}
    if has_body:
        statuses |= {413, 422}
    if secured and method in ("post", "put"):
        statuses |= {409, 413, 422}
    return statuses


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


def _numbers_for_decimals(schema: Any) -> Any:
    """msgspec documents Decimal as a string; the service reads and writes amounts as JSON numbers."""
    if isinstance(schema, list):
        return [_numbers_for_decimals(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    if schema.get("type") == "string" and schema.get("format") == "decimal":
        return {**{k: v for k, v in schema.items() if k != "format"}, "type": "number"}
    return {key: _numbers_for_decimals(value) for key, value in schema.items()}


def codes_by_status() -> dict[int, list[str]]:
    """Every `code` a status can carry: the interface's own and the domain's errors of its kind."""
    codes = {status: list(shared) for status, shared in SHARED_CODES.items()}
    for value in vars(errors).values():
        if (
            isinstance(value, type)
            and issubclass(value, errors.DomainError)
            and value is not errors.DomainError
        ):
            listed = codes.setdefault(STATUS_OF_KIND[value.kind], [])
            if value.code not in listed:
                listed.append(value.code)
    return codes
