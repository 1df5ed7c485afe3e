"""`GET /transactions/custodian/{code}/callbacks`: the deliveries of a transaction's callbacks, with every
attempt (time, outcome, response code, error)."""

from __future__ import annotations

from typing import Annotated

from litestar import Controller, Request, get
from litestar.di import NamedDependency

from interface.http.dependencies import HistoryDep, principal
from interface.http.documented import code_parameter, problems, version_header
from interface.http.security import AUDITOR, BROKER, authorize, roles
from interface.transactions import callback_bodies as callbacks
from interface.transactions.callback_shapes import CallbackDeliveries
from projections.callbacks.outbox import DeliveryStore

TransactionCode = Annotated[str, code_parameter("the transaction's code")]


class TransactionCallbacksController(Controller):
    path = "/transactions/custodian/{transaction_code:str}/callbacks"
    tags = ["Transactions"]
    guards = [authorize]
    opt = roles(BROKER, AUDITOR)
    parameters = version_header()

    @get("/", operation_id="listTransactionCallbacks", responses=problems(404), sync_to_thread=True)
    def list_callbacks(
        self,
        request: Request,
        transaction_code: TransactionCode,
        history: HistoryDep,
        deliveries: NamedDependency[DeliveryStore],
    ) -> CallbackDeliveries:
        """The callbacks of a transaction's status changes, in order, each with its attempts."""
        partner = principal(request).partner
        history.transaction(partner, transaction_code)  # 404 for an unknown code, and for another partner's
        records = deliveries.deliveries(partner, transaction_code)
        return callbacks.deliveries(transaction_code, records)
