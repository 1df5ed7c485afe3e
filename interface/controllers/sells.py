from __future__ import annotations

from litestar import Controller, Request, post
from litestar.params import JSONBody

from interface import presenters
from interface.controllers.common import (
    IdempotencyKey,
    LedgerDep,
    code_for,
    principal,
    problems,
    version_header,
)
from interface.schemas import responses as r
from interface.schemas.commands import sell_request
from interface.schemas.requests import BrokerSell
from interface.security import BROKER, authorize, roles


class BrokerSellController(Controller):
    path = "/paymentrequest/brokersell"
    tags = ["Sell"]
    guards = [authorize]
    opt = roles(BROKER)
    parameters = version_header()

    @post(
        "/simulate",
        operation_id="simulateBrokerSell",
        status_code=200,
        responses=problems(404, 422, 503),
        sync_to_thread=True,
    )
    def simulate(
        self, request: Request, data: JSONBody[BrokerSell], ledger: LedgerDep, idempotency_key: IdempotencyKey
    ) -> r.TransactionEnvelope:
        """Prices a sell by fiatValue (the payout wanted) or by cryptoAmount, executing nothing."""
        order = ledger.simulate_sell(principal(request).partner, sell_request(data))
        return presenters.simulation(ledger.settings, order, ledger.clock.now())

    @post(
        "/",
        operation_id="createBrokerSell",
        status_code=201,
        responses=problems(404, 409, 422, 503),
        sync_to_thread=True,
    )
    def create(
        self, request: Request, data: JSONBody[BrokerSell], ledger: LedgerDep, idempotency_key: IdempotencyKey
    ) -> r.TransactionEnvelope:
        """Creates a sell (Initiated) with a single-use deposit address for the customer's payment."""
        transaction = ledger.create_sell(
            principal(request).partner, sell_request(data), code_for(request, idempotency_key)
        )
        return presenters.transaction(ledger.settings, transaction)
