"""GET /prices: route and shapes, and `FEATURE`, what the app lists of them."""

from __future__ import annotations

from domain import errors as e
from interface.prices import shapes
from interface.prices.routes import PriceController
from interface.shared.feature import Feature

FEATURE = Feature(
    name="prices",
    route_handlers=[PriceController],
    problem_codes={"getPrices": (e.CurrencyNotFound, e.PriceUnavailable)},
    shapes=[shapes],
)
