"""GET /prices/{currency}: buy and sell prices per crypto."""

from __future__ import annotations

from decimal import Decimal

from interface.http.shapes import (
    Body,
    Timestamp,
)


class CryptoPrice(Body):
    buy: Decimal
    sell: Decimal
    updated: Timestamp


class Prices(Body):
    currency_code: str
    created: Timestamp
    prices: dict[str, CryptoPrice]
