"""The operator's resolution of a BLOCKED sell or a late payment: `POST
/transactions/custodian/{code}/resolution` (contract-notes.md, "Resolving blocked sells and late
payments")."""

from __future__ import annotations

from litestar import Controller, Request, post
from litestar.params import JSONBody

from application.commands import ResolutionRequest
from domain.transaction import Resolution
from interface.http.dependencies import ResolutionsDep, SettingsDep, principal
from interface.http.documented import IdempotencyKey, problems, version_header
from interface.http.request_writes import unit_of
from interface.http.security import OPERATOR, authorize, roles
from interface.shared import transaction_presenters as presenters
from interface.shared import transaction_shapes as r
from interface.transactions.custodian import TransactionCode
from interface.transactions.shapes import TransactionResolution


class TransactionResolutionController(Controller):
    path = "/transactions/custodian"
    tags = ["Transactions"]
    guards = [authorize]
    parameters = version_header()

    @post(
        "/{transaction_code:str}/resolution",
        operation_id="resolveTransaction",
        status_code=200,
        opt=roles(OPERATOR),
        responses=problems(404, 409, 422),
        sync_to_thread=True,
    )
    def resolve(
        self,
        request: Request,
        transaction_code: TransactionCode,
        data: JSONBody[TransactionResolution],
        resolutions: ResolutionsDep,
        settings: SettingsDep,
        idempotency_key: IdempotencyKey,
    ) -> r.TransactionEnvelope:
        """Resolves money no transaction can use. `AcceptReceived`: a BLOCKED sell goes on with the amount
        received, priced again at its quoted price (then ToPayout or COMPLETED). `Refund`: a BLOCKED sell or
        a CANCELLED sell paid late sends back what it received less the coin's network fee (Refunding, then
        REFUNDED when `POST /chain/sendouts` reports the refund confirmed; REFUNDED at once when the fee
        leaves nothing to send), to `refundAddress` or the account's withdraw address."""
        command = ResolutionRequest(Resolution(data.resolution), data.reason, data.refund_address)
        partner = principal(request).partner
        transaction = resolutions.resolve(partner, transaction_code, command, unit=unit_of(request))
        return presenters.transaction(settings, transaction)
