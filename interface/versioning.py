"""The `api_version` header: every endpoint serves one version (1.2, or 1.1 for the alternative sell
status update); a missing header or another version is refused with 400 and the supported value."""

from __future__ import annotations

from litestar.connection import ASGIConnection
from litestar.handlers.base import BaseRouteHandler
from litestar.params import Parameter

from interface.problems import ApiProblem

CURRENT = "1.2"
HEADER = "api_version"


def api_version_parameter(version: str = CURRENT) -> Parameter:
    return Parameter(
        str,
        header=HEADER,
        required=True,
        description=f"API version; this endpoint answers to {version}",
        examples=None,
        pattern=None,
    )


def check_api_version(connection: ASGIConnection, handler: BaseRouteHandler) -> None:
    supported = handler.opt.get("api_version", CURRENT)
    given = connection.headers.get(HEADER)
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
            f"api_version {given!r} is not served by this endpoint; use {supported}",
        )
