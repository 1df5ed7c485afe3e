"""The content checks of a body that broke its schema (a buy, a sell, a new customer, a deposit report, a
reserve adjustment), run on the fields that could be read, so that one 422 lists every problem: the missing
and mistyped fields (`interface.http.bodies`) and what the rest says wrong (the same checks the use cases
make,
which list every problem of a body that kept its schema too)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from application.commands import AdjustmentRequest
from application.request_checks import Draft
from application.settings import Direction
from application.use_cases import UseCases
from domain.errors import DomainError
from interface.alternative.shapes import AccountBuy, AccountBuySimulation, AccountSell
from interface.chain.shapes import ChainDeposit
from interface.customers.shapes import CustomerCreate
from interface.reserves.shapes import ReserveAdjustmentCreate
from interface.transactions.shapes import BrokerBuy, BrokerBuyCreate, BrokerSell

# (the use cases, partner, readable fields, names of the fields that could not be read) -> problems
ContentCheck = Callable[[UseCases, str, Mapping[str, Any], frozenset[str]], list[DomainError]]


def _broker_buy(
    use_cases: UseCases, _: str, fields: Mapping[str, Any], unread: frozenset[str]
) -> list[DomainError]:
    return use_cases.desk.checks.problems(Draft.read(Direction.BUY, fields, unread))


def _broker_sell(
    use_cases: UseCases, _: str, fields: Mapping[str, Any], unread: frozenset[str]
) -> list[DomainError]:
    return use_cases.desk.checks.problems(Draft.read(Direction.SELL, fields, unread))


def _account_buy(
    use_cases: UseCases, _: str, fields: Mapping[str, Any], unread: frozenset[str]
) -> list[DomainError]:
    return use_cases.desk.checks.problems(use_cases.alternative.account_buy_draft(fields, unread))


def _account_sell(
    use_cases: UseCases, partner: str, fields: Mapping[str, Any], unread: frozenset[str]
) -> list[DomainError]:
    return use_cases.desk.checks.problems(use_cases.alternative.account_sell_draft(partner, fields, unread))


def _customer(
    use_cases: UseCases, _: str, fields: Mapping[str, Any], unread: frozenset[str]
) -> list[DomainError]:
    return use_cases.customers.registration_problems(
        fields.get("trustLevel"), fields.get("status"), fields.get("currencyCode")
    )


def _chain_deposit(
    use_cases: UseCases, _: str, fields: Mapping[str, Any], unread: frozenset[str]
) -> list[DomainError]:
    return use_cases.settlement.report_problems(fields.get("cryptoCode"), fields.get("cryptoAmount"))


def _reserve_adjustment(
    use_cases: UseCases, _: str, fields: Mapping[str, Any], unread: frozenset[str]
) -> list[DomainError]:
    to, source = fields.get("toReserve"), fields.get("fromReserve")
    request = AdjustmentRequest(
        kind=fields.get("kind"),
        asset_code=fields.get("code"),
        amount=fields.get("amount"),
        to_reserve=to.name if to else None,
        to_type=to.type if to else None,
        from_reserve=source.name if source else None,
        from_type=source.type if source else None,
    )
    return use_cases.reserves.adjustment_problems(request, unread)


CONTENT_CHECKS: dict[type, ContentCheck] = {
    CustomerCreate: _customer,
    ChainDeposit: _chain_deposit,
    ReserveAdjustmentCreate: _reserve_adjustment,
    BrokerBuy: _broker_buy,
    BrokerBuyCreate: _broker_buy,
    BrokerSell: _broker_sell,
    AccountBuySimulation: _account_buy,
    AccountBuy: _account_buy,
    AccountSell: _account_sell,
}


def content_problems(
    target: Any, use_cases: UseCases, partner: str, fields: Mapping[str, Any], unread: frozenset[str]
) -> list[str]:
    """One line per problem of what could be read of a body of type `target` (none for other bodies)."""
    check = CONTENT_CHECKS.get(target)
    if check is None:
        return []
    return [line for problem in check(use_cases, partner, fields, unread) for line in problem.errors]
