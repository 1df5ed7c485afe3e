from __future__ import annotations

from collections.abc import Callable
from typing import Annotated

from litestar import Controller, Request, post, put
from litestar.params import JSONBody

from application.settings import Settings
from domain.transaction import Transaction
from interface.http.dependencies import BuysDep, SettingsDep, SettlementDep, principal
from interface.http.documented import IdempotencyKey, code_parameter, problems, version_header
from interface.http.request_writes import unit_of
from interface.http.security import BROKER, OPERATOR, authorize, roles
from interface.shared import transaction_presenters as presenters
from interface.shared import transaction_shapes as r
from interface.transactions.shapes import PayoutUpdate

TransactionCode = Annotated[str, code_parameter("the transaction's code")]


def payout_step(
    step: Callable[..., Transaction],
    request: Request,
    code: str,
    data: PayoutUpdate | None,
    settings: Settings,
) -> r.TransactionEnvelope:
    """One step of the payout flow, with the bank account and reference the operator gave, if any."""
    data = data or PayoutUpdate()
    transaction = step(
        principal(request).partner,
        code,
        data.payment_reference,
        data.customer_bank_account_id,
        unit=unit_of(request),
    )
    return presenters.transaction(settings, transaction)


class CustodianTransactionController(Controller):
    path = "/transactions/custodian"
    tags = ["Transactions"]
    guards = [authorize]
    parameters = version_header()

    @post(
        "/{tx_code:str}/commit",
        operation_id="commitTransaction",
        status_code=200,
        opt=roles(BROKER),
        responses=problems(404, 409),
        sync_to_thread=True,
    )
    def commit(
        self,
        request: Request,
        tx_code: TransactionCode,
        buys: BuysDep,
        settings: SettingsDep,
        idempotency_key: IdempotencyKey,
    ) -> r.TransactionEnvelope:
        """Commits a Staged buy: it becomes Sending. A buy past its validity window is CANCELLED (409)."""
        transaction = buys.commit(principal(request).partner, tx_code, unit=unit_of(request))
        return presenters.transaction(settings, transaction)

    @put(
        "/{transaction_code:str}/payoutconfirming",
        operation_id="confirmPayout",
        opt=roles(OPERATOR),
        responses=problems(404, 409, 422),
        sync_to_thread=True,
    )
    def payout_confirming(
        self,
        request: Request,
        transaction_code: TransactionCode,
        settlement: SettlementDep,
        settings: SettingsDep,
        idempotency_key: IdempotencyKey,
        data: JSONBody[PayoutUpdate | None] = None,
    ) -> r.TransactionEnvelope:
        """Starts the payout of a sell in ToPayout: it becomes PayoutConfirming."""
        return payout_step(settlement.confirm_payout, request, transaction_code, data, settings)

    @put(
        "/{transaction_code:str}/payout",
        operation_id="payout",
        opt=roles(OPERATOR),
        responses=problems(404, 409, 422),
        sync_to_thread=True,
    )
    def payout(
        self,
        request: Request,
        transaction_code: TransactionCode,
        settlement: SettlementDep,
        settings: SettingsDep,
        idempotency_key: IdempotencyKey,
        data: JSONBody[PayoutUpdate | None] = None,
    ) -> r.TransactionEnvelope:
        """Records the payout of a sell in ToPayout or PayoutConfirming: it becomes COMPLETED."""
        return payout_step(settlement.pay_out, request, transaction_code, data, settings)
