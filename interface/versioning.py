"""The `api_version` header: every endpoint serves one version (1.2, or 1.1 for the alternative sell
status update); a missing header, a repeated one or another version is refused with 400 and the
supported value."""

from __future__ import annotations

from litestar.connection import ASGIConnection
from litestar.handlers.base import BaseRouteHandler

from domain.errors import quoted_text
from interface.problems import ApiProblem

CURRENT = "1.2"
HEADER = "api_version"


def check_api_version(connection: ASGIConnection, handler: BaseRouteHandler) -> None:
    supported = handler.opt.get("api_version", CURRENT)
    values = connection.headers.getall(HEADER, [])
    if len(values) > 1:
        raise ApiProblem(
            400,
            "api_version_repeated",
            f"the header api_version was sent {len(values)} times ({', '.join(map(repr, values))}); "
            f"send it once, as {supported}",
        )
    given = values[0] if values else None
    if given is None:
        raise ApiProblem(
            400,
            "api_version_missing",
            f"the header api_version is required; this endpoint answers to {supported}",
        )
    if given.strip() != supported:
        raise ApiProblem(
            400,
            "api_version_unsupported",
            f"api_version {quoted_text(given)} is not served by this endpoint; use {supported}",
        )
