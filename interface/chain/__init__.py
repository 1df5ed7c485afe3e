"""Reports of the blockchain watcher (deposits, sendouts): routes and shapes, and `FEATURE`, what the app
lists of them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from application.use_cases import UseCases
from domain import errors as e
from interface.chain import shapes
from interface.chain.routes import ChainController
from interface.chain.shapes import ChainDeposit
from interface.shared import transaction_shapes
from interface.shared.feature import Feature
from interface.shared.refusals import AMOUNT


def _chain_deposit(
    use_cases: UseCases, _: str, fields: Mapping[str, Any], unread: frozenset[str]
) -> list[e.DomainError]:
    return use_cases.settlement.report_problems(fields.get("cryptoCode"), fields.get("cryptoAmount"))


FEATURE = Feature(
    name="chain",
    route_handlers=[ChainController],
    body_checks={ChainDeposit: _chain_deposit},
    problem_codes={
        "reportDeposit": (
            *AMOUNT,
            e.ValidationFailed,
            e.CryptoUnknown,
            e.DepositAddressUnknown,
            e.ChainReportConflict,
        ),
        "reportSendout": (
            e.ValidationFailed,
            e.TransactionNotFound,
            e.ChainReportConflict,
            e.InvalidStateTransition,
        ),
    },
    shapes=[shapes, transaction_shapes],
)
