"""The content checks of a buy or sell body that broke its schema, run on the fields that could be read, so
that one 422 lists every problem: the missing and mistyped fields (`interface.bodies`) and what the rest
says wrong (`application.request_checks`, the same checks the use cases make)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from application.ledger import Ledger
from application.request_checks import Draft
from application.settings import Direction
from domain.errors import DomainError
from interface.schemas.alternative import AccountBuy, AccountBuySimulation, AccountSell
from interface.schemas.requests import BrokerBuy, BrokerBuyCreate, BrokerSell

# (ledger, partner, readable fields, names of the fields that could not be read) -> problems
ContentCheck = Callable[[Ledger, str, Mapping[str, Any], frozenset[str]], list[DomainError]]


def _broker_buy(
    ledger: Ledger, _: str, fields: Mapping[str, Any], unread: frozenset[str]
) -> list[DomainError]:
    return ledger.desk.checks.problems(Draft.read(Direction.BUY, fields, unread))


def _broker_sell(
    ledger: Ledger, _: str, fields: Mapping[str, Any], unread: frozenset[str]
) -> list[DomainError]:
    return ledger.desk.checks.problems(Draft.read(Direction.SELL, fields, unread))


def _account_buy(
    ledger: Ledger, _: str, fields: Mapping[str, Any], unread: frozenset[str]
) -> list[DomainError]:
    return ledger.desk.checks.problems(ledger.account_buy_draft(fields, unread))


def _account_sell(
    ledger: Ledger, partner: str, fields: Mapping[str, Any], unread: frozenset[str]
) -> list[DomainError]:
    return ledger.desk.checks.problems(ledger.account_sell_draft(partner, fields, unread))


CONTENT_CHECKS: dict[type, ContentCheck] = {
    BrokerBuy: _broker_buy,
    BrokerBuyCreate: _broker_buy,
    BrokerSell: _broker_sell,
    AccountBuySimulation: _account_buy,
    AccountBuy: _account_buy,
    AccountSell: _account_sell,
}


def content_problems(
    target: Any, ledger: Ledger, partner: str, fields: Mapping[str, Any], unread: frozenset[str]
) -> list[str]:
    """One line per problem of what could be read of a body of type `target` (none for other bodies)."""
    check = CONTENT_CHECKS.get(target)
    if check is None:
        return []
    return [line for problem in check(ledger, partner, fields, unread) for line in problem.errors]
