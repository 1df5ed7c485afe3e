"""Query parameters an endpoint does not take are refused, as unknown body fields are
(`interface.http.bodies`): `GET /transactions/custodian?customercode=alice` would otherwise list every
customer's transactions, the misspelt filter silently ignored.

What an endpoint takes is what litestar reads for it: the query parameters of its route handler's kwargs
model, which litestar builds once per route from the handler's signature and the dependencies it names (the
names as clients send them: `asOf`, not `as_of`). The same signatures make the API document's parameters,
so the document lists every parameter each operation takes (tests/interface/test_unknown_query_parameters.py
holds the two equal).

A request naming any other parameter, with a value or without (`?customercode=alice`, `?debug`), is refused
with 400 `malformed_request`, one line per unknown name, the detail adding the names the endpoint takes; on
every endpoint, the console's pages included (its router shows the refusal as a page). OPTIONS is let
through: it is answered by the path, whatever its query (a CORS preflight carries the query of the request it
asks for). The check is made with the other checks of a request's head (`interface.http.request_head`, the
first middleware, for requests with a query only), before the token, any use case, idempotency key or body
is looked at.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl

from litestar import Litestar
from litestar.types import Scope

from domain.errors import quoted_text
from interface.http.problems import RequestRefused

MOST_NAMED = 10  # unknown parameters named in one refusal; the rest are counted


@dataclass(frozen=True)
class TakenParameters:
    """The query parameters a route handler takes, by the names clients send; `any_name` when it reads the
    whole query (litestar's reserved `query` argument), so that no name is unknown to it."""

    names: frozenset[str]
    any_name: bool = False

    @classmethod
    def of(cls, kwargs_model: Any) -> TakenParameters:
        """From litestar's kwargs model of a handler (its own parameters and its dependencies')."""
        names = frozenset(parameter.field_alias for parameter in kwargs_model.expected_query_params)
        return cls(names, "query" in kwargs_model.expected_reserved_kwargs)

    def unknown_in(self, query_string: bytes) -> list[str]:
        """The names of `query_string` this handler does not take, each once, in the order sent."""
        if self.any_name:
            return []
        sent = parse_qsl(query_string.decode("latin-1"), keep_blank_values=True, errors="replace")
        return list(dict.fromkeys(name for name, _ in sent if name not in self.names))


def taken_by_handlers(app: Litestar) -> dict[int, TakenParameters]:
    """What every HTTP route handler of `app` takes, by the handler's id (a handler lives as long as its
    app): read from the kwargs models litestar made for its routes."""
    return {
        id(handler): TakenParameters.of(kwargs_model)
        for route in app.routes
        for handler, kwargs_model in getattr(route, "route_handler_map", {}).values()
    }


def refusal_of(unknown: list[str], taken: TakenParameters) -> RequestRefused:
    """400 `malformed_request`: one line per unknown name (with the name meant, when one differs only in
    case or separators), and what the endpoint takes."""
    errors = [_line_of(name, taken.names) for name in unknown[:MOST_NAMED]]
    if len(unknown) > MOST_NAMED:
        errors.append(f"and {len(unknown) - MOST_NAMED} more query parameters this endpoint does not take")
    detail = "; ".join([*errors, _what_is_taken(taken.names)])
    return RequestRefused(400, "malformed_request", detail, errors=errors)


def _line_of(name: str, names: frozenset[str]) -> str:
    line = f"query parameter {quoted_text(name)} is not one this endpoint takes"
    meant = [known for known in sorted(names) if _loosely(known) == _loosely(name)]
    return f"{line} (did you mean {meant[0]!r}?)" if meant else line


def _loosely(name: str) -> str:
    """A name without case, `_` or `-`: `customer_code` and `customercode` are loosely `customerCode`."""
    return name.replace("_", "").replace("-", "").casefold()


def _what_is_taken(names: frozenset[str]) -> str:
    if not names:
        return "this endpoint takes no query parameters"
    *others, last = sorted(names, key=str.casefold)
    listed = f"{', '.join(others)} and {last}" if others else last
    return f"this endpoint takes the query parameter{'s' if others else ''} {listed}"


class KnownQueryParameters:
    """The query parameters each route handler of one app takes, read from the app on the first request with
    a query (`interface.http.request_head` asks, for such requests only)."""

    def __init__(self) -> None:
        self._taken: dict[int, TakenParameters] | None = None

    def refuse_unknown(self, scope: Scope) -> None:
        """Raises the refusal of a request naming a query parameter its route handler does not take; OPTIONS
        is answered by its path, whatever its query."""
        query_string = scope.get("query_string", b"")
        if not query_string or scope["method"] == "OPTIONS":
            return
        if self._taken is None:
            self._taken = taken_by_handlers(scope["litestar_app"])
        taken = self._taken.get(id(scope["route_handler"]))
        unknown = taken.unknown_in(query_string) if taken is not None else []
        if taken is not None and unknown:
            raise refusal_of(unknown, taken)
