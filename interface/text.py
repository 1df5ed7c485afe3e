"""Text the ledger can store, checked where it enters: bodies, path and query parameters, headers.

PostgreSQL's `text` holds every Unicode character but NUL (U+0000), and UTF-8 has no form for a lone
surrogate (U+D800 to U+DFFF, which JSON can still write as `\\ud800`). Text with either would be recorded as
an event that no read model can hold, so it is refused before anything is recorded: 422
`text_not_storable` in a body, 400 `text_not_storable` in a path, query parameter or header.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import parse_qsl

from litestar.enums import ScopeType
from litestar.middleware import ASGIMiddleware
from litestar.types import ASGIApp, Receive, Scope, Send

from interface.problems import RequestRefused

CODE = "text_not_storable"


def unstorable(text: str) -> str | None:
    """Why `text` cannot be stored, or None when it can."""
    if "\x00" in text:
        return "contains a NUL character (U+0000)"
    if text.isascii():
        return None
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as error:
        return f"contains a lone surrogate (U+{ord(text[error.start]):04X}), which is not a character"
    return None


def shown(text: str) -> str:
    """`text` as a problem may quote it: as it is if it can be stored, else with JSON's escapes (a lone
    surrogate cannot even be written in the answer's UTF-8)."""
    return text if unstorable(text) is None else json.dumps(text)[1:-1]


def unstorable_in(value: Any, where: str = "$") -> list[str]:
    """One line per string (object keys included) of a decoded JSON value that cannot be stored."""
    if isinstance(value, str):
        reason = unstorable(value)
        return [] if reason is None else [f"{where} {reason}; remove it"]
    if isinstance(value, dict):
        found: list[str] = []
        for key, item in value.items():
            reason = unstorable(key)
            if reason is not None:
                found.append(f"a key of {where} {reason}; remove it")
            found.extend(unstorable_in(item, f"{where}.{shown(key)}"))
        return found
    if isinstance(value, list):
        return [line for index, item in enumerate(value) for line in unstorable_in(item, f"{where}[{index}]")]
    return []


def refuse_unstorable_body(value: Any) -> None:
    problems = unstorable_in(value)
    if problems:
        raise RequestRefused(422, CODE, "; ".join(problems), errors=problems)


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
    """Refuses a request whose path, query parameters or headers hold text the ledger cannot store."""

    scopes = (ScopeType.HTTP,)

    async def handle(self, scope: Scope, receive: Receive, send: Send, next_app: ASGIApp) -> None:
        problems = _parameter_problems(scope)
        if problems:
            raise RequestRefused(400, CODE, "; ".join(problems), errors=problems)
        await next_app(scope, receive, send)
