from __future__ import annotations

from litestar import Controller, Request, post
from litestar.params import JSONBody

from interface.http.dependencies import BuysDep, ClockDep, SettingsDep, principal
from interface.http.documented import IdempotencyKey, problems, version_header
from interface.http.request_writes import unit_of
from interface.http.security import BROKER, authorize, roles
from interface.idempotency.keys import code_for
from interface.shared import transaction_presenters as presenters
from interface.shared import transaction_shapes as r
from interface.transactions.shapes import BrokerBuy, BrokerBuyCreate, buy_request


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
        self,
        request: Request,
        data: JSONBody[BrokerBuy],
        buys: BuysDep,
        settings: SettingsDep,
        clock: ClockDep,
        idempotency_key: IdempotencyKey,
    ) -> r.TransactionEnvelope:
        """Prices a buy without executing anything (status SIMULATED)."""
        order = buys.simulate(principal(request).partner, buy_request(data))
        return presenters.simulation(settings, order, clock.now())

    @post(
        "/",
        operation_id="createBrokerBuy",
        status_code=201,
        responses=problems(404, 409, 422, 503),
    )
    async def create(
        self,
        request: Request,
        data: JSONBody[BrokerBuyCreate],
        buys: BuysDep,
        idempotency_key: IdempotencyKey,
    ) -> r.TransactionEnvelope:
        """Creates a buy: Sending, or Staged when `stage` is true (commit it in a second step)."""
        # one dependency: litestar resolves two or more in a task group of their own, on every request
        transaction = await buys.store.run(
            buys.create,
            principal(request).partner,
            buy_request(data),
            data.stage,
            code_for(request, idempotency_key),
            unit=unit_of(request),
        )
        return presenters.transaction(buys.context.settings, transaction)
