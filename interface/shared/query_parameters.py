"""The query parameters several features take, read one way: an instant (`asOf`, `from`, `to`) by the one
reading of instants, and a choice among known values (a transaction's status or type), each refused alike
with 400 `malformed_request` naming the parameter and the form it must have."""

from __future__ import annotations

from datetime import datetime

from litestar.params import QueryParameter

from domain.errors import quoted_text
from domain.transaction import Status, TransactionType
from interface.http.problems import ApiProblem
from interface.shared import instants

# the statuses a recorded transaction can have (a simulation is never recorded)
STATUSES = tuple(status.value for status in Status if status != Status.SIMULATED)
TYPES = tuple(kind.value for kind in TransactionType)


def choice(name: str, values: tuple[str, ...]) -> QueryParameter:
    return QueryParameter(name=name, required=False, schema_extra={"enum": list(values)})


def moment(name: str, description: str) -> QueryParameter:
    return QueryParameter(name=name, required=False, format="date-time", description=description)


def moment_of(name: str, value: str | None) -> datetime | None:
    """The instant of the query parameter `name` (None when not given) by the one reading of instants
    (`interface.shared.instants`: RFC 3339 with an offset, within the years 1 to 9999 in UTC); 400
    `malformed_request` naming the parameter and the form otherwise. Every `asOf`, `from` and `to` of the API
    is read here."""
    if value is None:
        return None
    try:
        return instants.instant(name, value)
    except instants.Unreadable as error:
        raise malformed(name, value, error.expected) from None


def one_of(name: str, value: str | None, values: tuple[str, ...]) -> str | None:
    if value is not None and value not in values:
        raise malformed(name, value, f"one of {', '.join(values)}")
    return value


def malformed(name: str, value: str, expected: str) -> ApiProblem:
    return ApiProblem(
        400, "malformed_request", f"query parameter {name}={quoted_text(value)} must be {expected}"
    )
