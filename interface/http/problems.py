"""Every refusal as RFC 9457 problem details (`application/problem+json`) with a stable `code`.

Domain errors map by their kind; litestar's own exceptions (routing, body decoding, size) map here too,
and anything unexpected becomes a 500 without a stack trace (and is logged: a 5xx is a bug). Every problem
names the request it answers in `requestId` (`interface.http.request_ids`), as its `X-Request-Id` does.
"""

from __future__ import annotations

import logging
from typing import Any

import msgspec
import psycopg
from litestar import Request, Response
from litestar.exceptions import HTTPException, NotAuthorizedException, ValidationException
from litestar.response.base import ASGIResponse
from litestar.status_codes import HTTP_500_INTERNAL_SERVER_ERROR
from psycopg_pool import PoolTimeout

from application.store.faults import InterfaceError, OperationalError
from application.store.request_writes import CompanionRefused
from domain.errors import DomainError, Refusal
from interface.http.request_ids import request_id_of
from interface.http.shapes import Problem, documented_patterns

log = logging.getLogger("broker_ledger.http")
# litestar's InternalServerException (a 500) for a body whose client went away (or that came too slowly,
# `interface.http.server_limits`) before all of it arrived: the client's doing, counted and logged as a 400
# (nobody
# is left to read the answer)
CLIENT_GONE = "client disconnected prematurely"
PROBLEM_JSON = "application/problem+json"
STATUS_OF_KIND = {
    Refusal.INVALID: 422,
    Refusal.NOT_FOUND: 404,
    Refusal.CONFLICT: 409,
    Refusal.UNAVAILABLE: 503,
}
CODE_OF_STATUS = {
    400: "malformed_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    409: "conflict",
    413: "request_too_large",
    415: "unsupported_media_type",
    422: "validation_failed",
    429: "too_many_requests",
    503: "service_unavailable",
}
TITLES = {
    400: "Malformed request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not found",
    405: "Method not allowed",
    409: "Conflict",
    413: "Request too large",
    415: "Unsupported media type",
    422: "Invalid request",
    429: "Too many requests",
    500: "Internal error",
    503: "Service unavailable",
}


# Titles of the interface's own codes; a code without one here is titled after itself ("text_not_storable":
# "Text not storable"), so a title never names another problem than its code.
TITLES_OF_CODES = {
    "api_version_missing": "API version missing",
    "api_version_unsupported": "API version not served",
    "api_version_repeated": "API version repeated",
    "idempotency_key_invalid": "Invalid Idempotency-Key",
    "idempotency_key_reused": "Idempotency-Key reused",
    "idempotency_request_in_progress": "Request in progress",
    "duplicate_key": "Key named twice",
    "database_unavailable": "Database unavailable",
}


def title_of(status: int, code: str) -> str:
    if code in TITLES_OF_CODES:
        return TITLES_OF_CODES[code]
    if code == CODE_OF_STATUS.get(status) or code == "internal_error":
        return TITLES.get(status, "Error")
    return code.replace("_", " ").capitalize()


class ApiProblem(HTTPException):
    """A refusal raised by the interface itself (tokens, versions, idempotency) with its own code."""

    def __init__(
        self,
        status: int,
        code: str,
        detail: str,
        headers: dict[str, str] | None = None,
        errors: list[str] | None = None,
    ) -> None:
        super().__init__(detail=detail, status_code=status, headers=headers)
        self.code = code
        self.errors = errors if errors is not None else [detail]


class RequestRefused(ApiProblem):
    """A refusal of the request as it was sent (its media type, JSON, text), before any use case ran."""


REFUSED_BEFORE_EXECUTION = "refused_before_execution"
NOT_EXECUTED_STATUSES = frozenset({400, 413, 415})


def _mark_refused_before_execution(request: Request, error: HTTPException | DomainError) -> None:
    """Tells the Idempotency-Key middleware that the request was refused for its own content, before the
    use case judged it against anything recorded (a domain refusal that `judges_request_only`), or before
    any use case ran, so the answer is not stored for the key: the client may correct the request and send
    it again under the same key."""
    if isinstance(error, DomainError):
        refused = error.judges_request_only
    else:
        refused = isinstance(error, RequestRefused | ValidationException)
        refused = refused or error.status_code in NOT_EXECUTED_STATUSES
    if refused:
        request.scope.setdefault("state", {})[REFUSED_BEFORE_EXECUTION] = True


class ProblemResponse(Response[Problem]):
    """A problem's answer, whose body names the request it answers in `requestId`: filled in as it is sent,
    from the request's scope (`interface.http.request_ids`), where the problem did not name one."""

    def to_asgi_response(self, app: Any, request: Request, **kwargs: Any) -> ASGIResponse:
        if self.content.request_id is None:
            self.content = msgspec.structs.replace(self.content, request_id=request_id_of(request.scope))
        return super().to_asgi_response(app, request, **kwargs)


def problem_response(
    status: int,
    code: str,
    detail: str,
    errors: list[str] | None = None,
    title: str | None = None,
    headers: dict[str, str] | None = None,
    request_id: str | None = None,
) -> Response[Problem]:
    """A problem's answer; its `requestId` is the request's that it answers (`ProblemResponse`), unless
    `request_id` names one."""
    body = Problem(
        type=f"urn:broker-ledger:problem:{code}",
        title=title or title_of(status, code),
        status=status,
        detail=detail,
        code=code,
        errors=errors if errors is not None else [detail],
        request_id=request_id,
    )
    return ProblemResponse(body, status_code=status, media_type=PROBLEM_JSON, headers=headers)


def domain_error(request: Request, error: DomainError) -> Response[Problem]:
    _mark_refused_before_execution(request, error)
    status = STATUS_OF_KIND[error.kind]
    headers = {"Retry-After": "5"} if status == 503 else None
    return problem_response(status, error.code, error.detail, error.errors, error.title, headers)


def http_error(request: Request, error: HTTPException) -> Response[Problem]:
    _mark_refused_before_execution(request, error)
    if isinstance(error, ApiProblem):
        return problem_response(
            error.status_code, error.code, error.detail, error.errors, headers=error.headers
        )
    if isinstance(error, ValidationException):
        return _validation_problem(error)
    if error.detail == CLIENT_GONE:
        return problem_response(400, "malformed_request", "the client left before its whole body arrived")
    status = error.status_code
    headers = dict(error.headers or {})
    if isinstance(error, NotAuthorizedException):
        headers.setdefault("WWW-Authenticate", 'Bearer realm="broker-ledger"')
    detail = error.detail or TITLES.get(status, "Error")
    if status == 404 and detail == "Not Found":
        detail = "no such resource: check the path against the API document at /schema"
    return problem_response(status, CODE_OF_STATUS.get(status, "error"), detail, headers=headers or None)


def _validation_problem(error: ValidationException) -> Response[Problem]:
    """A body that is not JSON is malformed (400); JSON that breaks the schema is invalid (422)."""
    extra = error.extra if isinstance(error.extra, list) else []
    if not extra:
        return problem_response(400, "malformed_request", error.detail or "the request could not be read")
    if {"key": "data", "message": "'data'", "source": "body"} in extra:
        # how litestar reports a request without the body its handler needs: the missing kwarg's KeyError
        return problem_response(400, "malformed_request", "this request needs a body")
    errors = [_describe(item) for item in extra]
    source = {item.get("source") for item in extra if isinstance(item, dict)}
    status = 422 if source <= {"body"} else 400
    return problem_response(status, CODE_OF_STATUS[status], "; ".join(errors), errors)


PLACES = {"query": "query parameter", "path": "path parameter", "header": "header", "cookie": "cookie"}


def _describe(item: object) -> str:
    """One line per problem, naming a parameter as the client sends it: `query parameter pageSize: Expected
    `int` <= 200` (litestar says `Expected `int` <= 200 (ParamType.QUERY field 'page_size')`)."""
    if not isinstance(item, dict):
        return str(item)
    message = documented_patterns(str(item.get("message", "invalid value")))
    key = item.get("key")
    source = item.get("source")
    where = PLACES.get(str(getattr(source, "value", source)).lower())
    if key and key != "data":
        name = key if where == "header" else _camel(str(key))
        return f"{where} {name}: {message}" if where else f"{name}: {message}"
    return message


def _camel(name: str) -> str:
    first, *rest = name.split("_")
    return first + "".join(part.capitalize() for part in rest)


def unexpected_error(request: Request, error: Exception) -> Response[Problem]:
    log.exception(
        "unexpected error on %s %s (request %s)",
        request.method,
        request.url.path,
        request_id_of(request.scope),
        exc_info=error,
    )
    return problem_response(
        HTTP_500_INTERNAL_SERVER_ERROR,
        "internal_error",
        "the service failed to answer this request; it has been logged. Retry later.",
    )


def database_unavailable(request: Request, error: Exception) -> Response[Problem]:
    log.warning(
        "database unavailable on %s %s (request %s): %s",
        request.method,
        request.url.path,
        request_id_of(request.scope),
        error,
    )
    return problem_response(
        503,
        "database_unavailable",
        "the ledger's database cannot be reached right now; retry after the time in Retry-After",
        headers={"Retry-After": "2"},
    )


def key_held(request: Request, error: Exception) -> Response[Problem]:
    """A save refused because its request's Idempotency-Key is another request's: nothing was written. The
    idempotency middleware answers with what the key's holder says instead; this stands only if it cannot."""
    return problem_response(
        409,
        "idempotency_request_in_progress",
        "a request with this Idempotency-Key holds it; retry when it has finished",
        headers={"Retry-After": "1"},
    )


EXCEPTION_HANDLERS = {
    DomainError: domain_error,
    CompanionRefused: key_held,
    HTTPException: http_error,
    OperationalError: database_unavailable,
    InterfaceError: database_unavailable,
    psycopg.OperationalError: database_unavailable,
    PoolTimeout: database_unavailable,
    Exception: unexpected_error,
}
