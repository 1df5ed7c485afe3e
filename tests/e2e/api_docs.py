"""Runs the examples of docs/api.md: every ```bash block in order in one shell, each printing one JSON
response, which must have the shape of the ```json sample that follows it (same keys at every level, and
the same status, type and code values)."""

from __future__ import annotations

import json
import re
import subprocess
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "api.md"
BLOCK = re.compile(r"```(bash|json)\n(.*?)```", re.DOTALL)
MARK = "@@example-end@@"
COMPARED_VALUES = {"status", "type", "code", "statusCode"}


@dataclass
class Example:
    script: str
    sample: object | None


def examples(text: str | None = None) -> list[Example]:
    found: list[Example] = []
    for kind, body in BLOCK.findall(text if text is not None else DOC.read_text()):
        if kind == "bash":
            found.append(Example(body, None))
        elif found and found[-1].sample is None:
            found[-1].sample = json.loads(body, parse_float=Decimal)
    return found


def run(found: list[Example], env: dict[str, str], timeout: float = 120) -> list[str]:
    """Runs every example in one bash process; returns what each printed."""
    script = "set -euo pipefail\n" + "".join(f"{e.script}\necho '{MARK}'\n" for e in found)
    done = subprocess.run(
        ["bash", "-c", script], env=env, capture_output=True, text=True, timeout=timeout, check=False
    )
    if done.returncode != 0:
        raise AssertionError(f"the examples failed (exit {done.returncode}):\n{done.stdout}\n{done.stderr}")
    return done.stdout.split(MARK + "\n")[: len(found)]


def shape_differences(sample: object, actual: object, where: str = "$") -> list[str]:
    """Keys that differ at any level, and documented status, type and code values that differ (outside
    event data, whose codes are the run's own)."""
    if isinstance(sample, dict):
        if not isinstance(actual, dict):
            return [f"{where}: expected an object, got {actual!r}"]
        problems = (
            [f"{where}: keys {sorted(set(sample) ^ set(actual))} differ"]
            if set(sample) != set(actual)
            else []
        )
        for key in set(sample) & set(actual):
            if key in COMPARED_VALUES and ".data" not in where and sample[key] != actual[key]:
                problems.append(f"{where}.{key}: documented {sample[key]!r}, got {actual[key]!r}")
            problems += shape_differences(sample[key], actual[key], f"{where}.{key}")
        return problems
    if isinstance(sample, list) and sample and isinstance(actual, list) and actual:
        return shape_differences(sample[0], actual[0], f"{where}[0]")
    return []
