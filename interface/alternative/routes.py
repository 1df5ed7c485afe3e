"""The alternative buy and sell endpoints: the same flows as the custodian endpoints, named by account."""

from __future__ import annotations

from typing import Annotated

from litestar import Controller, Request, post, put
from litestar.params import JSONBody

from interface.alternative.shapes import (
    AccountBuy,
    AccountBuySimulation,
    AccountSell,
    Execution,
    SellStatusUpdate,
)
from interface.http.dependencies import AlternativeDep, BuysDep, ClockDep, SellsDep, SettingsDep, principal
from interface.http.documented import IdempotencyKey, code_parameter, problems, version_header
from interface.http.request_writes import unit_of
from interface.http.security import BROKER, OPERATOR, authorize, roles
from interface.idempotency.keys import code_for
from interface.shared import transaction_presenters as presenters
from interface.shared import transaction_shapes as r


class AlternativeBuyController(Controller):
    path = "/buy/broker"
    tags = ["Alternative endpoints"]
    guards = [authorize]
    opt = roles(BROKER)
    parameters = version_header()

    @post(
        "/simulate",
        operation_id="simulateAccountBuy",
        status_code=200,
        responses=problems(404, 422, 503),
        sync_to_thread=True,
    )
    def simulate(
        self,
        request: Request,
        data: JSONBody[AccountBuySimulation],
        alternative: AlternativeDep,
        buys: BuysDep,
        settings: SettingsDep,
        clock: ClockDep,
        idempotency_key: IdempotencyKey,
    ) -> r.TransactionEnvelope:
        """Prices a buy for the account's customer, to the account's withdraw address (SIMULATED)."""
        partner = principal(request).partner
        buy = alternative.account_buy(
            partner, data.account_code, data.payment_method_code, data.amount, data.currency, None
        )
        return presenters.simulation(settings, buys.simulate(partner, buy), clock.now())

    @post(
        "/",
        operation_id="createAccountBuy",
        status_code=201,
        responses=problems(404, 409, 422, 503),
        sync_to_thread=True,
    )
    def create(
        self,
        request: Request,
        data: JSONBody[AccountBuy],
        alternative: AlternativeDep,
        buys: BuysDep,
        settings: SettingsDep,
        idempotency_key: IdempotencyKey,
    ) -> r.TransactionEnvelope:
        """Creates a buy that awaits the customer's fiat payment (Staged); settle it with
        POST /Transaction/execute."""
        partner = principal(request).partner
        buy = alternative.account_buy(
            partner, data.account_code, data.payment_method_code, data.amount, data.currency, data.ip
        )
        transaction = buys.create(
            partner, buy, stage=True, code=code_for(request, idempotency_key), unit=unit_of(request)
        )
        return presenters.transaction(settings, transaction)


class ExecutionController(Controller):
    path = "/Transaction/execute"
    tags = ["Alternative endpoints"]
    guards = [authorize]
    opt = roles(BROKER)
    parameters = version_header()

    @post(
        "/",
        operation_id="executeTransaction",
        status_code=200,
        responses=problems(404, 409, 422),
        sync_to_thread=True,
    )
    def execute(
        self,
        request: Request,
        data: JSONBody[Execution],
        alternative: AlternativeDep,
        settings: SettingsDep,
        idempotency_key: IdempotencyKey,
    ) -> r.TransactionEnvelope:
        """Settles a buy awaiting payment: PAYMENTSUCCESS sends it (Sending); PAYMENTFAILED or
        PAYMENTCANCELLED cancels it (CANCELLED); any other resultCode is 422."""
        transaction = alternative.execute(
            principal(request).partner, data.transaction_code, data.result_code, unit=unit_of(request)
        )
        return presenters.transaction(settings, transaction)


class AlternativeSellController(Controller):
    path = "/sell/broker"
    tags = ["Alternative endpoints"]
    guards = [authorize]
    opt = roles(BROKER)
    parameters = version_header()

    @post(
        "/",
        operation_id="createAccountSell",
        status_code=201,
        responses=problems(404, 409, 422, 503),
        sync_to_thread=True,
    )
    def create(
        self,
        request: Request,
        data: JSONBody[AccountSell],
        alternative: AlternativeDep,
        sells: SellsDep,
        settings: SettingsDep,
        idempotency_key: IdempotencyKey,
    ) -> r.TransactionEnvelope:
        """Creates a sell of cryptoAmount from the account (Initiated), in the payment method's currency."""
        partner = principal(request).partner
        sell = alternative.account_sell(
            partner, data.account_code, data.payment_method_code, data.crypto_amount, data.ip
        )
        transaction = sells.create(partner, sell, code_for(request, idempotency_key), unit=unit_of(request))
        return presenters.transaction(settings, transaction)


class SellStatusController(Controller):
    path = "/transaction"
    tags = ["Alternative endpoints"]
    guards = [authorize]
    opt = {**roles(OPERATOR), "api_version": "1.1"}
    parameters = version_header("1.1")

    @put(
        "/{transaction_code:str}",
        operation_id="updateSellStatus",
        responses=problems(404, 409, 422),
        sync_to_thread=True,
    )
    def update(
        self,
        request: Request,
        transaction_code: Annotated[str, code_parameter("the sell's transaction code")],
        data: JSONBody[SellStatusUpdate],
        alternative: AlternativeDep,
        settings: SettingsDep,
        idempotency_key: IdempotencyKey,
    ) -> r.TransactionEnvelope:
        """PayoutConfirming (from ToPayout) or SellCompleted (from ToPayout or PayoutConfirming)."""
        transaction = alternative.update_sell_status(
            principal(request).partner, transaction_code, data.status_code, unit=unit_of(request)
        )
        return presenters.transaction(settings, transaction)


ALTERNATIVE_CONTROLLERS = [
    AlternativeBuyController,
    ExecutionController,
    AlternativeSellController,
    SellStatusController,
]
