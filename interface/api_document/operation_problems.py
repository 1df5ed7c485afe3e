"""The `code` values each operation can answer, by status: what the document lists under its responses.

An operation's refusals are those of the shared machinery it goes through (malformed request, token and
role, api_version, text, idempotency, body size and validation, rate limit, database: `SHARED_CODES` in
`interface.api_document.openapi`) and the rules of its own use case, which its feature names in its
description (`Feature.problem_codes`, by their domain errors, whose kind gives the status, and
`Feature.own_codes`). A response a handler declares itself (`responses=` on the route, e.g. GET /health's
503) keeps its description, with the codes listed here. tests/interface/test_problem_codes.py drives known
refusals of every operation and checks each against the document, and the schemathesis run checks every
problem it meets.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from interface.http.problems import STATUS_OF_KIND
from interface.shared.feature import Feature
from interface.shared.refusals import DomainErrors


@dataclass(frozen=True)
class OperationProblems:
    """Every feature's operations' own refusals, gathered from the features' descriptions."""

    domain_errors: Mapping[str, DomainErrors]
    own_codes: Mapping[str, Mapping[int, Sequence[str]]]
    without_database: frozenset[str]  # they never reach the database (liveness answers while it is down)

    @classmethod
    def of(cls, features: Sequence[Feature]) -> OperationProblems:
        return cls(
            domain_errors={op: errors for f in features for op, errors in f.problem_codes.items()},
            own_codes={op: codes for f in features for op, codes in f.own_codes.items()},
            without_database=frozenset().union(*(f.without_database for f in features)),
        )

    def domain_codes(self, operation_id: str) -> dict[int, list[str]]:
        """The codes of the operation's own rules, by status: its own codes first, then its domain errors'."""
        codes: dict[int, list[str]] = {}
        for status, more in self.own_codes.get(operation_id, {}).items():
            codes.setdefault(status, []).extend(more)
        for error in self.domain_errors.get(operation_id, ()):
            listed = codes.setdefault(STATUS_OF_KIND[error.kind], [])
            if error.code not in listed:
                listed.append(error.code)
        return codes
