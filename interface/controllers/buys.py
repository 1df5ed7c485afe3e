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
from interface.schemas.commands import buy_request
from interface.schemas.requests import BrokerBuy, BrokerBuyCreate
from interface.security import BROKER, authorize, roles


class BrokerBuyController(Controller):
    path = "/brokerbuy"
    tags = ["Buy"]
    guards = [authorize]
    opt = roles(BROKER)
    parameters = version_header()

    @post(
        "/simulate",
        operation_id="simulateBrokerBuy",
        status_code=200,
        responses=problems(404, 422, 503),
        sync_to_thread=True,
    )
    def simulate(
        self, request: Request, data: JSONBody[BrokerBuy], ledger: LedgerDep, idempotency_key: IdempotencyKey
    ) -> r.TransactionEnvelope:
        """Prices a buy without executing anything (status SIMULATED)."""
        order = ledger.simulate_buy(principal(request).partner, buy_request(data))
        return presenters.simulation(ledger.settings, order, ledger.clock.now())

    @post(
        "/",
        operation_id="createBrokerBuy",
        status_code=201,
        responses=problems(404, 409, 422, 503),
        sync_to_thread=True,
    )
    def create(
        self,
        request: Request,
        data: JSONBody[BrokerBuyCreate],
        ledger: LedgerDep,
        idempotency_key: IdempotencyKey,
    ) -> r.TransactionEnvelope:
        """Creates a buy: Sending, or Staged when `stage` is true (commit it in a second step)."""
        transaction = ledger.create_buy(
            principal(request).partner, buy_request(data), data.stage, code_for(request, idempotency_key)
        )
        return presenters.transaction(ledger.settings, transaction)
