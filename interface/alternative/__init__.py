"""The alternative buy and sell endpoints, named by account: routes and shapes, and `FEATURE`, what the app
lists of them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from application.use_cases import UseCases
from domain import errors as e
from interface.alternative import shapes
from interface.alternative.routes import ALTERNATIVE_CONTROLLERS
from interface.alternative.shapes import AccountBuy, AccountBuySimulation, AccountSell
from interface.shared import transaction_shapes
from interface.shared.feature import Feature
from interface.shared.refusals import BUY, MOVE_ON, SELL


def _account_buy(
    use_cases: UseCases, _: str, fields: Mapping[str, Any], unread: frozenset[str]
) -> list[e.DomainError]:
    return use_cases.desk.checks.problems(use_cases.alternative.account_buy_draft(fields, unread))


def _account_sell(
    use_cases: UseCases, partner: str, fields: Mapping[str, Any], unread: frozenset[str]
) -> list[e.DomainError]:
    return use_cases.desk.checks.problems(use_cases.alternative.account_sell_draft(partner, fields, unread))


FEATURE = Feature(
    name="alternative",
    route_handlers=ALTERNATIVE_CONTROLLERS,
    body_checks={AccountBuySimulation: _account_buy, AccountBuy: _account_buy, AccountSell: _account_sell},
    problem_codes={
        "simulateAccountBuy": BUY,
        "createAccountBuy": BUY,
        "createAccountSell": SELL,
        "executeTransaction": (*MOVE_ON, e.TransactionNotStaged),
        "updateSellStatus": MOVE_ON,
    },
    shapes=[shapes, transaction_shapes],
)
