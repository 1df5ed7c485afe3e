"""Bodies of `GET /reconciliation`: a partner's reserves over a period, its chain reports and differences."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from typing import Annotated, Literal

import msgspec

from interface.http.shapes import Body

Timestamp = Annotated[datetime, msgspec.Meta(tz=True)]
DifferenceKind = Literal[
    "reported_not_expected",
    "expected_not_reported",
    "amount_mismatch",
    "confirmation_mismatch",
    "reported_twice",
    "not_posted",
    "reserve_unbalanced",
]


class ReserveRollForward(Body):
    """One asset in one reserve over the period: `opening` + `postings` = `closing` when `balanced`."""

    name: str
    code: str
    opening: Decimal
    postings: Decimal
    closing: Decimal
    balanced: bool


class ChainReport(Body):
    """A deposit or sendout report recorded on a transaction in the period: what it said, the event it
    made, and whether that event's posting is in the postings (`null`: the event posts nothing)."""

    report: Literal["deposit", "sendout"]
    transaction_code: str
    tx_id: str
    crypto_amount: Decimal | None
    confirmations: int
    event: str
    at: Timestamp
    posted: bool | None


class Difference(Body):
    """What an auditor must look into: its kind, the report (or reserve) it is about, and why."""

    kind: DifferenceKind
    report: Literal["deposit", "sendout", "reserve"]
    transaction_code: str | None
    tx_id: str
    at: Timestamp
    detail: str


class Reconciliation(Body):
    """The period (`from`, `to`]; `clean` when it has no difference. `reports` and `differences` are the
    page `page` of each (`pageSize` of each a page), of `reportsTotal` and `differencesTotal`; `totalPages`
    pages hold them all. The reserves are all on every page."""

    from_: Timestamp = msgspec.field(name="from")
    to: Timestamp
    clean: bool
    page: int
    page_size: int
    total_pages: int
    reports_total: int
    differences_total: int
    reserves: list[ReserveRollForward]
    reports: list[ChainReport]
    differences: list[Difference]
