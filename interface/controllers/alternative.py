"""The alternative buy and sell endpoints: the same flows as the custodian endpoints, named by account."""

from __future__ import annotations

from typing import Annotated

from litestar import Controller, Request, post, put
from litestar.params import JSONBody

from interface import presenters
from interface.controllers.common import (
    IdempotencyKey,
    LedgerDep,
    code_for,
    code_parameter,
    principal,
    problems,
    version_header,
)
from interface.schemas import responses as r
from interface.schemas.alternative import (
    AccountBuy,
    AccountBuySimulation,
    AccountSell,
    Execution,
    SellStatusUpdate,
)
from interface.security import BROKER, OPERATOR, authorize, roles


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
        ledger: LedgerDep,
        idempotency_key: IdempotencyKey,
    ) -> r.TransactionEnvelope:
        """Prices a buy for the account's customer, to the account's withdraw address (SIMULATED)."""
        partner = principal(request).partner
        buy = ledger.account_buy(
            partner, data.account_code, data.payment_method_code, data.amount, data.currency, None
        )
        return presenters.simulation(ledger.settings, ledger.simulate_buy(partner, buy), ledger.clock.now())

    @post(
        "/",
        operation_id="createAccountBuy",
        status_code=201,
        responses=problems(404, 409, 422, 503),
        sync_to_thread=True,
    )
    def create(
        self, request: Request, data: JSONBody[AccountBuy], ledger: LedgerDep, idempotency_key: IdempotencyKey
    ) -> r.TransactionEnvelope:
        """Creates a buy that awaits the customer's fiat payment (Staged); settle it with
        POST /Transaction/execute."""
        partner = principal(request).partner
        buy = ledger.account_buy(
            partner, data.account_code, data.payment_method_code, data.amount, data.currency, data.ip
        )
        transaction = ledger.create_buy(partner, buy, stage=True, code=code_for(request, idempotency_key))
        return presenters.transaction(ledger.settings, transaction)


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
        self, request: Request, data: JSONBody[Execution], ledger: LedgerDep, idempotency_key: IdempotencyKey
    ) -> r.TransactionEnvelope:
        """Settles a buy awaiting payment: PAYMENTSUCCESS sends it (Sending); PAYMENTFAILED or
        PAYMENTCANCELLED cancels it (CANCELLED); any other resultCode is 422."""
        transaction = ledger.execute(principal(request).partner, data.transaction_code, data.result_code)
        return presenters.transaction(ledger.settings, transaction)


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
        ledger: LedgerDep,
        idempotency_key: IdempotencyKey,
    ) -> r.TransactionEnvelope:
        """Creates a sell of cryptoAmount from the account (Initiated), in the payment method's currency."""
        partner = principal(request).partner
        sell = ledger.account_sell(
            partner, data.account_code, data.payment_method_code, data.crypto_amount, data.ip
        )
        transaction = ledger.create_sell(partner, sell, code_for(request, idempotency_key))
        return presenters.transaction(ledger.settings, transaction)


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
        ledger: LedgerDep,
        idempotency_key: IdempotencyKey,
    ) -> r.TransactionEnvelope:
        """PayoutConfirming (from ToPayout) or SellCompleted (from ToPayout or PayoutConfirming)."""
        transaction = ledger.update_sell_status(
            principal(request).partner, transaction_code, data.status_code
        )
        return presenters.transaction(ledger.settings, transaction)


ALTERNATIVE_CONTROLLERS = [
    AlternativeBuyController,
    ExecutionController,
    AlternativeSellController,
    SellStatusController,
]
