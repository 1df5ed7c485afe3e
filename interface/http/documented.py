"""What a route declares for the API document: a code in its path, its own refusals, the api_version header
it requires, the Idempotency-Key header it takes."""

from __future__ import annotations

from typing import Annotated, Any

from litestar.openapi.datastructures import ResponseSpec
from litestar.openapi.spec import Example
from litestar.params import HeaderParameter, Parameter

from interface.http.problems import PROBLEM_JSON, TITLES
from interface.http.security import CURRENT, HEADER
from interface.http.shapes import CODE_PATTERN, Problem

IdempotencyKey = Annotated[
    str | None,
    HeaderParameter(
        name="Idempotency-Key",
        required=False,
        min_length=1,
        max_length=255,
        description="Retry-safe key: the same key and body within 24 h replays the first response",
    ),
]


def code_parameter(description: str, example: str | None = None) -> Parameter:
    """A path segment naming a customer or transaction, with the same rules as codes in bodies."""
    examples = [Example(value=example)] if example else None
    return Parameter(
        description=description, min_length=1, max_length=64, pattern=CODE_PATTERN, examples=examples
    )


def problems(*statuses: int) -> dict[int, ResponseSpec]:
    """The problem+json responses of a route's own refusals, for the API document (the ones every route
    can give, such as 400, 401 or 503, are added to the document by `interface.api_document.openapi`)."""
    return {
        status: ResponseSpec(
            data_container=Problem,
            description=TITLES.get(status, "Error"),
            media_type=PROBLEM_JSON,
            generate_examples=False,
        )
        for status in sorted(statuses)
    }


def version_header(version: str = CURRENT) -> dict[str, Any]:
    return {
        "api_version": HeaderParameter(
            annotation=str,
            name=HEADER,
            required=True,
            # an enum of one rather than a `const`: generators (openapi-python-client) make a Literal of a
            # const, which they cannot send as a header
            default=version,
            schema_extra={"enum": [version]},
            description=f"API version; this endpoint answers to {version}",
        )
    }
