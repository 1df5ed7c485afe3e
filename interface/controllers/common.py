"""What every controller shares: documented error responses, headers, and the caller's identity."""

from __future__ import annotations

from typing import Annotated, Any

from litestar import Request
from litestar.openapi.datastructures import ResponseSpec
from litestar.params import Parameter

from interface.auth import Principal
from interface.idempotency import transaction_code_for
from interface.problems import PROBLEM_JSON, TITLES
from interface.schemas.responses import Problem
from interface.versioning import CURRENT, HEADER

IdempotencyKey = Annotated[
    str | None,
    Parameter(
        header="Idempotency-Key",
        required=False,
        max_length=255,
        description="Retry-safe key: the same key and body within 24 h replays the first response",
    ),
]
COMMON_ERRORS = (400, 401, 403, 413, 429)


def problems(*statuses: int) -> dict[int, ResponseSpec]:
    """The problem+json responses a route can give, for the API document."""
    return {
        status: ResponseSpec(
            data_container=Problem,
            description=TITLES.get(status, "Error"),
            media_type=PROBLEM_JSON,
            generate_examples=False,
        )
        for status in sorted({*COMMON_ERRORS, *statuses})
    }


def version_header(version: str = CURRENT) -> dict[str, Any]:
    return {
        "api_version": Parameter(
            str,
            header=HEADER,
            required=True,
            const=True,
            default=version,
            description=f"API version; this endpoint answers to {version}",
        )
    }


def principal(request: Request) -> Principal:
    return request.user


def code_for(request: Request, key: str | None) -> str | None:
    """The transaction code of a create under an idempotency key, so a retry finds the first one."""
    return transaction_code_for(principal(request).partner, key) if key else None
