"""The API document's examples, taken from the checked examples of docs/api.md so the two cannot drift.

Each ```bash block of the guide sends one request with curl and is followed by the ```json answer the test
suite checks it gives (tests/e2e/test_api_docs.py). Here each block becomes an example of the operation its
method and path name: the body it sends (with the guide's shell variables filled in from the answers before
it, `$RUN` as `1`) and the answer under its status. The first example of each operation and status is kept.
Without the guide (an installed wheel has no docs/) the document simply has no examples.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec

GUIDE = Path(__file__).resolve().parents[1] / "docs" / "api.md"
BLOCK = re.compile(r"```(bash|json)\n(.*?)```", re.DOTALL)
ASSIGNED = re.compile(r"^(\w+)=\$\((?:broker|operator) ", re.MULTILINE)
PICKED = re.compile(r'^(\w+)=\$\(echo "\$(\w+)" \| jq -r \.([\w.]+)\)', re.MULTILINE)
VARIABLE = re.compile(r"\$\{?(\w+)\}?")
SOURCE = "docs/api.md"


@dataclass(frozen=True)
class Example:
    method: str
    path: str  # as sent, without the query
    body: Any  # the JSON sent, None without one
    status: int | None  # of a problem; None for the operation's success
    answer: msgspec.Raw


def guide_examples(text: str | None = None) -> list[Example]:
    if text is None:
        if not GUIDE.exists():
            return []
        text = GUIDE.read_text()
    values: dict[str, str] = {"RUN": "1", "BASE": ""}
    answers: dict[str, Any] = {}
    found = []
    blocks = BLOCK.findall(text)
    for (kind, script), (next_kind, sample) in zip(blocks, [*blocks[1:], ("", "")], strict=True):
        if kind != "bash" or next_kind != "json":
            continue
        answer = json.loads(sample)
        for name in ASSIGNED.findall(script):
            answers[name] = answer
        for name, source, path in PICKED.findall(script):
            picked = answers.get(source)
            for key in path.split("."):
                picked = picked.get(key) if isinstance(picked, dict) else None
            if picked is not None:
                values[name] = str(picked)
        request = _last_request(script, values)
        if request is not None:
            method, path, body = request
            status = answer.get("status") if isinstance(answer, dict) and "code" in answer else None
            found.append(Example(method, path, body, status, msgspec.Raw(sample.strip().encode())))
    return found


def _last_request(script: str, values: dict[str, str]) -> tuple[str, str, Any] | None:
    """The method, path and body of the block's last curl call (`broker ...` or `operator ...`)."""
    calls = [line for line in script.splitlines() if re.match(r"^(\w+=\$\()?(broker|operator) ", line)]
    if not calls:
        return None
    words = shlex.split(calls[-1].split("$(", 1)[-1].rstrip(")"))
    method, url, body = "GET", "", None
    for word, following in zip(words, [*words[1:], ""], strict=True):
        if word == "-X":
            method = following
        elif word == "-d":
            body = json.loads(VARIABLE.sub(lambda m: values.get(m.group(1), m.group(0)), following))
        elif word.startswith("$BASE"):
            url = VARIABLE.sub(lambda m: values.get(m.group(1), m.group(0)), word)
    return method, url.partition("?")[0], body


def add_examples(document: dict[str, Any], examples: list[Example]) -> None:
    """Puts each example on the operation whose path template and method match it."""
    templates = [
        (re.compile("^" + re.sub(r"\{[^}]+\}", "[^/]+", path) + "$", re.IGNORECASE), operations)
        for path, operations in document["paths"].items()
    ]
    for example in examples:
        for pattern, operations in templates:
            operation = operations.get(example.method.lower())
            if operation is not None and pattern.match(example.path):
                _add(operation, example)
                break


def _add(operation: dict[str, Any], example: Example) -> None:
    body = operation.get("requestBody", {}).get("content", {}).get("application/json")
    if body is not None and example.body is not None and "examples" not in body:
        body["examples"] = {"guide": {"summary": f"from {SOURCE}", "value": example.body}}
    responses = operation.get("responses", {})
    status = example.status or next((int(s) for s in sorted(responses) if s.startswith("2")), None)
    media = responses.get(str(status), {}).get("content", {})
    for content in media.values():
        content.setdefault("examples", {"guide": {"summary": f"from {SOURCE}", "value": example.answer}})
