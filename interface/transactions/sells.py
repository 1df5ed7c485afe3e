from __future__ import annotations

from litestar import Controller, Request, post
from litestar.params import JSONBody

from interface.http.dependencies import ClockDep, SellsDep, SettingsDep, principal
from interface.http.documented import IdempotencyKey, problems, version_header
from interface.http.request_writes import unit_of
from interface.http.security import BROKER, authorize, roles
from interface.idempotency.keys import code_for
from interface.shared import transaction_presenters as presenters
from interface.shared import transaction_shapes as r
from interface.transactions.shapes import BrokerSell, sell_request


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
        self,
        request: Request,
        data: JSONBody[BrokerSell],
        sells: SellsDep,
        settings: SettingsDep,
        clock: ClockDep,
        idempotency_key: IdempotencyKey,
    ) -> r.TransactionEnvelope:
        """Prices a sell by fiatValue (the payout wanted) or by cryptoAmount, executing nothing."""
        order = sells.simulate(principal(request).partner, sell_request(data))
        return presenters.simulation(settings, order, clock.now())

    @post(
        "/",
        operation_id="createBrokerSell",
        status_code=201,
        responses=problems(404, 409, 422, 503),
        sync_to_thread=True,
    )
    def create(
        self,
        request: Request,
        data: JSONBody[BrokerSell],
        sells: SellsDep,
        settings: SettingsDep,
        idempotency_key: IdempotencyKey,
    ) -> r.TransactionEnvelope:
        """Creates a sell (Initiated) with a single-use deposit address for the customer's payment."""
        transaction = sells.create(
            principal(request).partner,
            sell_request(data),
            code_for(request, idempotency_key),
            unit=unit_of(request),
        )
        return presenters.transaction(settings, transaction)
