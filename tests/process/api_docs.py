"""Runs the examples of a guide (docs/api.md): every ```bash block in order in one shell, each printing one
JSON response, which must equal the ```json sample that follows it value for value once both are normalised.

What differs from run to run is normalised the same way on both sides, as docs/api.md says:
- a timestamp (RFC 3339, in a value or inside a text) becomes `<time>`, a date `<date>` and a value that is a
  month alone (a monthly limit's `periodKey`) `<month>`; a sample's timestamps must be real ones (no hour 24),
  and where an object has both `created` and `validUntil` (or `at` and `valid_until`) the time between them
  must be the documented one;
- the calendar's values are checked by their rule on both sides instead: in one answer's limits every daily
  `periodKey` is the same day and every monthly one that day's month, so the guide answers as documented on
  any date (a month's and a year's end, 29 February: scripts/test runs it there under faketime);
- event ids (`evt_` + 32 hex digits), the events feed's cursors, transaction codes (`TX` + 16 hex digits),
  account codes (`AC` + 18), UUIDs, derivation paths and every Bitcoin address that the examples do not
  type themselves (the service's deposit addresses) are named in
  order of first appearance over the whole guide (`TX#1`, `AC#1`, `address#1`, ...), so the documented
  answer must use the same code or address where the service does and a new one where the service does;
- the run's unique `$RUN` is written `1` (`alice-1`);
- the database server GET /health names (a `server` value, `host:port`) becomes `<server>`;
- an event's `data` in a history (the ledger's own record of the event, which may gain fields) must hold
  every documented field with its value; fields beyond them are not compared.
Everything else is compared exactly: keys, strings, nulls, and numbers with their decimal places (an amount
is written at its asset's scale, 0.00002500 is not 0.00002).
"""

from __future__ import annotations

import json
import re
import subprocess
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import Any

from tests.e2e.support import ROOT

DOC = ROOT / "docs" / "api.md"
BLOCK = re.compile(r"```(bash|json)\n(.*?)```", re.DOTALL)
MARK = "@@example-end@@"
TIMESTAMP = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:\d\d)")
DATE = re.compile(r"\b\d{4}-\d\d-\d\d\b")
SERVER = "<server>"  # the database server GET /health names differs from machine to machine
MONTH = re.compile(r"^\d{4}-(?:0[1-9]|1[0-2])$")
NAMED = re.compile(
    r"(?P<event>\bevt_[0-9a-f]{32}\b)|(?P<cursor>\bZXYxOg[A-Za-z0-9_-]{10}(?![A-Za-z0-9_-]))"
    r"|(?P<TX>\bTX[0-9A-F]{16}\b)|(?P<AC>\bAC[0-9A-F]{18}\b)"
    r"|(?P<uuid>\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b)"
    r"|(?P<path>\bm(?:/\d+'?)+)|(?P<address>\b(?:bc1|tb1)[02-9ac-hj-np-z]{20,80}\b)"
)
WINDOWS = (("created", "validUntil"), ("at", "valid_until"))
EVENT_DATA = re.compile(r"\.events\[\d+\]\.data\b")  # an event's own fields, which may grow


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


@dataclass
class Normaliser:
    """One side's names: the same code, UUID, path or address gets the same name all through the guide."""

    run: str | None = None
    typed: frozenset[str] = frozenset()  # addresses the examples type themselves, kept as they are
    names: dict[str, str] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)

    def __call__(self, value: Any) -> Any:
        if isinstance(value, dict):
            return {key: SERVER if key == "server" else self(value[key]) for key in sorted(value)}
        if isinstance(value, list):
            return [self(item) for item in value]
        if isinstance(value, str):
            return self.text(value)
        return value

    def text(self, value: str) -> str:
        if self.run:
            value = value.replace(self.run, "1")
        value = TIMESTAMP.sub("<time>", value)
        value = DATE.sub("<date>", value)
        value = MONTH.sub("<month>", value)
        return NAMED.sub(self._name, value)

    def _name(self, match: re.Match[str]) -> str:
        token, kind = match.group(0), match.lastgroup or "?"
        if kind == "address" and token in self.typed:
            return token
        if token not in self.names:
            self.counts[kind] = self.counts.get(kind, 0) + 1
            self.names[token] = f"{kind}#{self.counts[kind]}"
        return self.names[token]


def typed_addresses(found: list[Example]) -> frozenset[str]:
    return frozenset(m.group(0) for e in found for m in NAMED.finditer(e.script) if m.lastgroup == "address")


def time_problems(sample: object, actual: object, where: str = "$") -> list[str]:
    """Timestamps of the sample that are no real time, and validity windows that differ from the service's."""
    problems = _unreal_times(sample, where) if isinstance(sample, str) else []
    if isinstance(sample, dict):
        for start, end in WINDOWS:
            if isinstance(actual, dict) and all(
                isinstance(side.get(key), str) for side in (sample, actual) for key in (start, end)
            ):
                try:
                    documented = _gap(sample[start], sample[end])
                except ValueError:
                    continue  # reported as no real time above
                if documented != _gap(actual[start], actual[end]):
                    problems.append(f"{where}: {start} to {end} is {documented}, the service gives another")
        for key, value in sample.items():
            inner = actual.get(key) if isinstance(actual, dict) else None
            problems += time_problems(value, inner, f"{where}.{key}")
    if isinstance(sample, list):
        for number, value in enumerate(sample):
            inner = actual[number] if isinstance(actual, list) and number < len(actual) else None
            problems += time_problems(value, inner, f"{where}[{number}]")
    return problems


def _unreal_times(text: str, where: str) -> list[str]:
    problems = [f"{where}: {text!r} has hour 24"] if re.search(r"T24:", text) else []
    for stamp in TIMESTAMP.findall(text):
        try:
            datetime.fromisoformat(stamp.replace("Z", "+00:00"))
        except ValueError:
            problems.append(f"{where}: {stamp!r} is no real time")
    return problems


def _gap(start: str, end: str) -> object:
    return datetime.fromisoformat(end.replace("Z", "+00:00")) - datetime.fromisoformat(
        start.replace("Z", "+00:00")
    )


def calendar_problems(answer: object, where: str = "$") -> list[str]:
    """Limits whose period keys break the calendar's rule: one day for every daily window of an answer, and
    that day's month for every monthly one (`2026-12-31` and `2026-12`, never `2027-01`)."""
    if isinstance(answer, list):
        return [
            p for number, item in enumerate(answer) for p in calendar_problems(item, f"{where}[{number}]")
        ]
    if not isinstance(answer, dict):
        return []
    problems = [p for key, value in answer.items() for p in calendar_problems(value, f"{where}.{key}")]
    windows = answer.get("limits")
    if isinstance(windows, list) and all(isinstance(w, dict) and "periodKey" in w for w in windows):
        keys = {(w.get("period"), w["periodKey"]) for w in windows}
        days = {key for period, key in keys if period == "daily"}
        months = {key for period, key in keys if period == "monthly"}
        if len(days) > 1 or len(months) > 1 or any(month != day[:7] for month in months for day in days):
            problems.append(
                f"{where}.limits: daily keys {sorted(days)} and monthly keys {sorted(months)} disagree"
            )
    return problems


def differences(sample: object, actual: object, where: str = "$") -> list[str]:
    """Where two normalised answers differ: keys, values, and numbers' decimal places."""
    if isinstance(sample, dict) and isinstance(actual, dict):
        extra_allowed = EVENT_DATA.search(where) is not None
        if extra_allowed:
            actual = {key: value for key, value in actual.items() if key in sample}
        problems = (
            [f"{where}: keys {sorted(set(sample) ^ set(actual))} differ"]
            if set(sample) != set(actual)
            else []
        )
        for key in sorted(set(sample) & set(actual)):
            problems += differences(sample[key], actual[key], f"{where}.{key}")
        return problems
    if isinstance(sample, list) and isinstance(actual, list):
        problems = (
            [f"{where}: {len(sample)} items documented, {len(actual)} given"]
            if len(sample) != len(actual)
            else []
        )
        for number, (one, other) in enumerate(zip(sample, actual, strict=False)):
            problems += differences(one, other, f"{where}[{number}]")
        return problems
    if _exact(sample) != _exact(actual):
        return [f"{where}: documented {_shown(sample)}, got {_shown(actual)}"]
    return []


def _exact(value: object) -> object:
    """A value with its type and, for a number, its decimal places (so 0.00002 is not 0.00002000)."""
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int | Decimal):
        return ("number", str(value))
    return value


def _shown(value: object) -> str:
    return str(value) if isinstance(value, int | Decimal) and not isinstance(value, bool) else repr(value)


def compare(found: list[Example], printed: list[str], run_value: str) -> list[str]:
    """Every difference between the documented answers and the printed ones, by example number."""
    typed = typed_addresses(found)
    documented, given = Normaliser(typed=typed), Normaliser(run=run_value, typed=typed)
    problems: list[str] = []
    for number, (example, text) in enumerate(zip(found, printed, strict=True), start=1):
        try:
            actual = json.loads(text, parse_float=Decimal)
        except ValueError:
            problems.append(f"example {number}: printed no JSON: {text!r}")
            continue
        problems += [f"example {number}: {p}" for p in time_problems(example.sample, actual)]
        for side, answer in (("documented", example.sample), ("given", actual)):
            problems += [f"example {number}: {side} {p}" for p in calendar_problems(answer)]
        problems += [f"example {number}: {p}" for p in differences(documented(example.sample), given(actual))]
    return problems
