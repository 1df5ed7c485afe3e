"""A request's head, before anything reads it: its path put into its route's spelling, and its path, query
parameters and headers refused when they hold text the ledger cannot store (`interface.http.text`), and its
query when it names a parameter its route does not take (`interface.http.query_checks`).

Paths are matched case-insensitively, as the original service does (`/Prices/EUR`, `/transaction/execute`
for `/Transaction/Execute`); the codes in a path keep their case. The API document keeps the spec's spelling.

Litestar routes case-sensitively and its middleware runs after routing, so the path is put into the routes'
own spelling before routing: each fixed segment that matches a route's segment but for case is written as
the route writes it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl

from litestar import Litestar
from litestar.enums import ScopeType
from litestar.middleware import ASGIMiddleware
from litestar.types import ASGIApp, Receive, Scope, Send

from interface.http.problems import RequestRefused
from interface.http.query_checks import KnownQueryParameters
from interface.http.text import CODE, unstorable


@dataclass(frozen=True)
class RouteShape:
    """A route's path as segments: a fixed segment in its spelling, a parameter as None."""

    segments: tuple[str | None, ...]

    @classmethod
    def of(cls, path: str) -> RouteShape:
        return cls(tuple(None if part.startswith("{") else part for part in path.strip("/").split("/")))

    def spelled(self, parts: list[str]) -> list[str] | None:
        """`parts` in this route's spelling, or None when they are not a path of this route."""
        if len(parts) != len(self.segments):
            return None
        spelled = []
        for part, segment in zip(parts, self.segments, strict=True):
            if segment is not None and part.lower() != segment.lower():
                return None
            spelled.append(part if segment is None else segment)
        return spelled

    @property
    def fixed(self) -> int:
        return sum(segment is not None for segment in self.segments)


class CaseInsensitivePaths:
    def __init__(self, paths: Iterable[str]) -> None:
        paths = list(paths)  # read twice: a generator would leave `exact` empty, and every path to the shapes
        shapes = {RouteShape.of(path) for path in paths}
        self.exact = {path.rstrip("/") or "/" for path in paths if "{" not in path}
        # more fixed segments first: /brokerbuy/simulate wins over /brokerbuy/{code}
        self.shapes = sorted(shapes, key=lambda shape: -shape.fixed)

    def spelled(self, path: str) -> str:
        if path in self.exact or path == "/":
            return path
        parts = path.strip("/").split("/")
        for shape in self.shapes:
            spelled = shape.spelled(parts)
            if spelled is not None:
                return "/" + "/".join(spelled) + ("/" if path.endswith("/") and len(path) > 1 else "")
        return path


class CaseInsensitiveLitestar(Litestar):
    """Litestar, with each request's path put into its route's spelling before routing."""

    _paths: CaseInsensitivePaths | None = None

    async def __call__(self, scope: Any, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            if self._paths is None:
                self._paths = CaseInsensitivePaths(route.path for route in self.routes)
            _respell(scope, self._paths)
        await super().__call__(scope, receive, send)


def _respell(scope: Scope, paths: CaseInsensitivePaths) -> None:
    path = scope["path"]
    spelled = paths.spelled(path)
    if spelled != path:
        scope["path"] = spelled


def _parameter_problems(scope: Scope) -> list[str]:
    problems: list[str] = []
    reason = unstorable(scope["path"])
    if reason is not None:
        problems.append(f"the path {reason}")
    try:
        query = parse_qsl(
            scope.get("query_string", b"").decode("latin-1"), keep_blank_values=True, errors="strict"
        )
    except UnicodeDecodeError:
        problems.append("the query string is not UTF-8 once percent-decoded")
        query = []
    for name, value in query:
        reason = unstorable(name + value)
        if reason is not None:
            problems.append(f"query parameter {name!r} {reason}")
    for name, value in scope["headers"]:
        if b"\x00" in name or b"\x00" in value:
            problems.append(f"header {name.decode('latin-1').replace(chr(0), '')!r} contains a NUL byte")
    return problems


class StorableTextMiddleware(ASGIMiddleware):
    """Refuses a request whose path, query parameters or headers hold text the ledger cannot store, then one
    whose query names a parameter its route does not take."""

    scopes = (ScopeType.HTTP,)

    def __init__(self) -> None:
        self.known_parameters = KnownQueryParameters()

    async def handle(self, scope: Scope, receive: Receive, send: Send, next_app: ASGIApp) -> None:
        problems = _parameter_problems(scope)
        if problems:
            raise RequestRefused(400, CODE, "; ".join(problems), errors=problems)
        if scope.get("query_string"):  # a request without a query (a buy) has nothing more to check here
            self.known_parameters.refuse_unknown(scope)
        await next_app(scope, receive, send)
