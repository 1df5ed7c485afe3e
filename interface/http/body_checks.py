"""The content checks of a body that broke its schema (a buy, a sell, a new customer, a deposit report, a
reserve adjustment), run on the fields that could be read, so that one 422 lists every problem: the missing
and mistyped fields (`interface.http.bodies`) and what the rest says wrong (the same checks the use cases
make, which list every problem of a body that kept its schema too).

Each feature gives the checks of its own bodies in its description (`interface.shared.feature.Feature`); the
app gathers them into one `BodyChecks` (`create_app()`), so the HTTP edge knows no feature's bodies."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from application.use_cases import UseCases
from domain.errors import DomainError

# (the use cases, partner, readable fields, names of the fields that could not be read) -> problems
ContentCheck = Callable[[UseCases, str, Mapping[str, Any], frozenset[str]], list[DomainError]]


@dataclass(frozen=True)
class BodyChecks:
    """Every feature's content checks, by the type of the body each checks, and the use cases they run on
    (the checks are the use cases' own)."""

    use_cases: UseCases
    checks: Mapping[type, ContentCheck]

    def problems(
        self, target: Any, partner: str, fields: Mapping[str, Any], unread: frozenset[str]
    ) -> list[str]:
        """One line per problem of what could be read of a body of type `target` (none for other bodies)."""
        check = self.checks.get(target)
        if check is None:
            return []
        return [line for problem in check(self.use_cases, partner, fields, unread) for line in problem.errors]
