from __future__ import annotations

from litestar import Controller, Request, post
from litestar.params import JSONBody

from application.commands import DepositReport, SendoutReport
from interface.chain.shapes import ChainDeposit, ChainSendout
from interface.http.dependencies import SettingsDep, SettlementDep, principal
from interface.http.documented import IdempotencyKey, problems, version_header
from interface.http.request_writes import unit_of
from interface.http.security import OPERATOR, authorize, roles
from interface.shared import transaction_presenters as presenters
from interface.shared import transaction_shapes as r


class ChainController(Controller):
    """Reports of the operator's blockchain watcher or wallet."""

    path = "/chain"
    tags = ["Chain reports"]
    guards = [authorize]
    opt = roles(OPERATOR)
    parameters = version_header()

    @post(
        "/deposits",
        operation_id="reportDeposit",
        status_code=200,
        responses=problems(404, 409, 422),
        sync_to_thread=True,
    )
    def deposit(
        self,
        request: Request,
        data: JSONBody[ChainDeposit],
        settlement: SettlementDep,
        settings: SettingsDep,
        idempotency_key: IdempotencyKey,
    ) -> r.TransactionEnvelope:
        """A payment to a sell's deposit address: Confirming, then ToPayout or COMPLETED when confirmed;
        BLOCKED when the amount differs. Idempotent per txId."""
        report = DepositReport(
            data.crypto_code, data.address, data.tx_id, data.crypto_amount, data.confirmations
        )
        transaction = settlement.report_deposit(principal(request).partner, report, unit=unit_of(request))
        return presenters.transaction(settings, transaction)

    @post(
        "/sendouts",
        operation_id="reportSendout",
        status_code=200,
        responses=problems(404, 409, 422),
        sync_to_thread=True,
    )
    def sendout(
        self,
        request: Request,
        data: JSONBody[ChainSendout],
        settlement: SettlementDep,
        settings: SettingsDep,
        idempotency_key: IdempotencyKey,
    ) -> r.TransactionEnvelope:
        """Our sendout of a buy: COMPLETED once confirmed. Idempotent per txId."""
        report = SendoutReport(data.transaction_code, data.tx_id, data.confirmations)
        transaction = settlement.report_sendout(principal(request).partner, report, unit=unit_of(request))
        return presenters.transaction(settings, transaction)
