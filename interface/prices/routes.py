from __future__ import annotations

from datetime import datetime
from typing import Annotated

from litestar import Controller, get
from litestar.openapi.spec import Example
from litestar.params import Parameter

from domain.pricing import Price
from interface.http.dependencies import ClockDep, DeskDep
from interface.http.documented import problems, version_header
from interface.http.security import BROKER, OPERATOR, authorize, roles
from interface.prices import shapes as r


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
        desk: DeskDep,
        clock: ClockDep,
    ) -> r.Prices:
        """Buy and sell prices of every crypto-currency in one fiat currency."""
        return _prices(currency, clock.now(), desk.price_list(currency))


def _prices(currency: str, at: datetime, price_list: dict[str, Price]) -> r.Prices:
    return r.Prices(
        currency_code=currency,
        created=at,
        prices={
            code: r.CryptoPrice(buy=p.buy, sell=p.sell, updated=p.updated) for code, p in price_list.items()
        },
    )
