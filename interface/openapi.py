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
from litestar import Litestar, Request
from litestar.openapi import OpenAPIConfig
from litestar.openapi.plugins import JsonRenderPlugin, ScalarRenderPlugin
from litestar.openapi.spec import Components, SecurityScheme

from interface import schemas
from interface.problems import PROBLEM_JSON, TITLES
from interface.rate_limits import EXEMPT_PATHS

REF = "#/components/schemas/{name}"
HEADERS_OF_STATUS = {
    401: {"WWW-Authenticate": "the authentication scheme to use"},
    429: {"Retry-After": "seconds to wait before trying again"},
    503: {"Retry-After": "seconds to wait before trying again"},
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


def corrected(document: dict[str, Any], app: Litestar) -> dict[str, Any]:
    document = copy.deepcopy(document)
    schemas = document["components"]["schemas"]
    schemas.update({name: schema for name, schema in struct_schemas().items() if name in schemas})
    roles = roles_by_operation(app)
    for path, operations in document["paths"].items():
        limited = not path.startswith(EXEMPT_PATHS)
        for method, operation in operations.items():
            _correct_operation(method, operation, roles.get(operation.get("operationId")), limited)
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
    return _numbers_for_decimals(components)


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
