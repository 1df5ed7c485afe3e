from __future__ import annotations

from typing import Annotated

from litestar import Controller, get
from litestar.openapi.spec import Example
from litestar.params import Parameter

from interface import presenters
from interface.controllers.common import LedgerDep, problems, version_header
from interface.schemas import responses as r
from interface.security import BROKER, OPERATOR, authorize, roles


class PriceController(Controller):
    path = "/prices"
    tags = ["Prices"]
    guards = [authorize]
    opt = roles(BROKER, OPERATOR)
    parameters = version_header()

    @get("/{currency:str}", operation_id="getPrices", responses=problems(404, 503), sync_to_thread=True)
    def prices(
        self,
        currency: Annotated[
            str, Parameter(description="fiat currency code", max_length=3, examples=[Example(value="EUR")])
        ],
        ledger: LedgerDep,
    ) -> r.Prices:
        """Buy and sell prices of every crypto-currency in one fiat currency."""
        return presenters.prices(currency, ledger.clock.now(), ledger.price_list(currency))
