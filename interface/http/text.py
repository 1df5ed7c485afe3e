"""Text the ledger can store, the rule: checked where text enters, in bodies (`interface.http.bodies`) and in
a request's path, query parameters and headers (`interface.http.request_head`).

PostgreSQL's `text` holds every Unicode character but NUL (U+0000), and UTF-8 has no form for a lone
surrogate (U+D800 to U+DFFF, which JSON can still write as `\\ud800`). Text with either would be recorded as
an event that no read model can hold, so it is refused before anything is recorded: 422
`text_not_storable` in a body, 400 `text_not_storable` in a path, query parameter or header.
"""

from __future__ import annotations

import json
from typing import Any

from interface.http.problems import RequestRefused

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
