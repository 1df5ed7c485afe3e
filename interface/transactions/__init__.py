"""Transactions over HTTP: buys, sells, the custodian flows (commit, payouts), reading them and their
callbacks: routes, the shapes of their requests and the mapping of a body to its command (the transaction as
every endpoint presents it is shared: `interface.shared.transaction_shapes`), and `FEATURE`, what the app
lists of them (the list and lookups of transactions are heavy reads)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from application.request_checks import Draft
from application.settings import Direction
from application.use_cases import UseCases
from domain import errors as e
from interface.shared import callback_shapes as shared_callback_shapes
from interface.shared import transaction_shapes
from interface.shared.feature import Feature
from interface.shared.refusals import BUY, MOVE_ON, SELL
from interface.transactions import callback_shapes, shapes
from interface.transactions.buys import BrokerBuyController
from interface.transactions.callbacks import TransactionCallbacksController
from interface.transactions.custodian import CustodianTransactionController
from interface.transactions.lookups import TransactionReadingController
from interface.transactions.resolutions import TransactionResolutionController
from interface.transactions.sells import BrokerSellController
from interface.transactions.shapes import BrokerBuy, BrokerBuyCreate, BrokerSell

# a resolution's refusals: no such sell, nothing to resolve (409), the amount received priced again refused
# (too small for the fees, over the customer's limit), a refund address that is not of the coin
RESOLVE = (
    e.ValidationFailed,
    e.TransactionNotFound,
    e.InvalidStateTransition,
    e.AmountTooSmall,
    e.TrustLevelLimitExceeded,
    e.CryptoAddressInvalid,
    e.AccountNotFound,
)


def _broker_buy(
    use_cases: UseCases, _: str, fields: Mapping[str, Any], unread: frozenset[str]
) -> list[e.DomainError]:
    return use_cases.desk.checks.problems(Draft.read(Direction.BUY, fields, unread))


def _broker_sell(
    use_cases: UseCases, _: str, fields: Mapping[str, Any], unread: frozenset[str]
) -> list[e.DomainError]:
    return use_cases.desk.checks.problems(Draft.read(Direction.SELL, fields, unread))


FEATURE = Feature(
    name="transactions",
    route_handlers=[
        BrokerBuyController,
        BrokerSellController,
        CustodianTransactionController,
        TransactionCallbacksController,
        TransactionResolutionController,
    ],
    heavy_reads=[TransactionReadingController],
    body_checks={BrokerBuy: _broker_buy, BrokerBuyCreate: _broker_buy, BrokerSell: _broker_sell},
    problem_codes={
        "simulateBrokerBuy": BUY,
        "createBrokerBuy": BUY,
        "simulateBrokerSell": SELL,
        "createBrokerSell": SELL,
        "commitTransaction": (*MOVE_ON, e.TransactionNotStaged),
        "payout": MOVE_ON,
        "confirmPayout": MOVE_ON,
        "resolveTransaction": RESOLVE,
        "getTransaction": (e.TransactionNotFound,),
        "getTransactionHistory": (e.TransactionNotFound,),
        "listTransactionCallbacks": (e.TransactionNotFound,),
    },
    own_codes={"listTransactions": {429: ["heavy_reads_busy"], 503: ["read_model_behind"]}},
    shapes=[shapes, callback_shapes, shared_callback_shapes, transaction_shapes],
)
