"""The API document's examples, taken from the checked examples of docs/api.md so the two cannot drift.

Each ```bash block of the guide sends one request with curl and is followed by the ```json answer the test
suite checks it gives (tests/process/test_api_docs.py). Here each block becomes an example of the
operation its method and path name: the body it sends (with the guide's shell variables filled in from the
answers before it, `$RUN` as `1`) and the answer under its status. The first example of each operation and
status is kept. In a checkout the guide is docs/api.md itself; an installed wheel carries it as
`interface/api_document/api.md` (pyproject.toml), read through importlib.resources.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import msgspec

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "api.md"
PACKAGED_GUIDE = "api.md"  # docs/api.md, as the wheel carries it in this package
BLOCK = re.compile(r"```(bash|json)\n(.*?)```", re.DOTALL)
ASSIGNED = re.compile(r"^(\w+)=\$\((?:broker|operator) ", re.MULTILINE)
PICKED = re.compile(r'^(\w+)=\$\(echo "\$(\w+)" \| jq -r \.([\w.]+)\)', re.MULTILINE)
VARIABLE = re.compile(r"\$\{?(\w+)\}?")
CALL = re.compile(r"^(\w+=\$\()?(broker|operator|curl) ")
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
        text = guide_text()
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


def guide_text() -> str:
    """docs/api.md: the checkout's, else the copy the installed package carries."""
    if GUIDE.exists():
        return GUIDE.read_text(encoding="utf-8")
    return resources.files(__package__).joinpath(PACKAGED_GUIDE).read_text(encoding="utf-8")


def _last_request(script: str, values: dict[str, str]) -> tuple[str, str, Any] | None:
    """The method, path and body of the block's last call (`broker ...`, `operator ...` or `curl ...`): a
    JSON body, or the fields of a form sent as `-d name=value`."""
    calls = [line for line in script.splitlines() if CALL.match(line)]
    if not calls:
        return None
    words = shlex.split(calls[-1].split("$(", 1)[-1].rstrip(")"))
    method, url, body, form = "GET", "", None, {}

    def filled(text: str) -> str:
        return VARIABLE.sub(lambda m: values.get(m.group(1), m.group(0)), text)

    for word, following in zip(words, [*words[1:], ""], strict=True):
        if word == "-X":
            method = following
        elif word == "-d" and following.startswith(("{", "[")):
            body = json.loads(filled(following))
        elif word == "-d":
            name, _, value = following.partition("=")
            form[name] = filled(value)
        elif word.startswith("$BASE"):
            url = filled(word)
    body = form or body
    if body is not None and "-X" not in words:
        method = "POST"  # what curl does with a body
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
    body = next(iter(operation.get("requestBody", {}).get("content", {}).values()), None)
    if body is not None and example.body is not None and "examples" not in body:
        body["examples"] = {"guide": {"summary": f"from {SOURCE}", "value": example.body}}
    responses = operation.get("responses", {})
    status = example.status or next((int(s) for s in sorted(responses) if s.startswith("2")), None)
    media = responses.get(str(status), {}).get("content", {})
    for content in media.values():
        content.setdefault("examples", {"guide": {"summary": f"from {SOURCE}", "value": example.answer}})
