"""What a route is handed by name (`create_app` provides each, `interface.app.dependencies`): the ledger's
settings and clock, and the use cases of its feature (`application.use_cases`), which it calls directly; and
the caller's identity."""

from __future__ import annotations

from litestar import Request
from litestar.di import NamedDependency
from litestar.params import SkipValidation

from application.alternative import AlternativeFlows
from application.buys import Buys
from application.customers import Customers
from application.history import History
from application.limits import Limits
from application.orders import OrderDesk
from application.ports import Clock
from application.reserves import Reserves
from application.resolutions import Resolutions
from application.sells import Sells
from application.settings import Settings
from application.settlement import Settlement
from interface.http.auth import Principal

SettingsDep = NamedDependency[Settings]
ClockDep = NamedDependency[SkipValidation[Clock]]  # a Protocol, which no isinstance check can take
CustomersDep = NamedDependency[Customers]
LimitsDep = NamedDependency[Limits]
BuysDep = NamedDependency[Buys]
SellsDep = NamedDependency[Sells]
SettlementDep = NamedDependency[Settlement]
ResolutionsDep = NamedDependency[Resolutions]
AlternativeDep = NamedDependency[AlternativeFlows]
ReservesDep = NamedDependency[Reserves]
HistoryDep = NamedDependency[History]
DeskDep = NamedDependency[OrderDesk]


def principal(request: Request) -> Principal:
    return request.user
