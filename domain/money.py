"""Money: Decimal amounts, assets with their precision, and every rounding rule of the service.

All rounding in the service happens here. A fiat amount is rounded to its currency's minor unit, a crypto
amount to its precision. Calculations run in a wide decimal context so that an 18-decimal ETH amount
multiplied by a price never loses a digit before the rule rounds it.
"""

from __future__ import annotations

import decimal
from dataclasses import dataclass
from decimal import ROUND_CEILING, ROUND_FLOOR, ROUND_HALF_UP, Decimal

WIDE = decimal.Context(prec=80, traps=[decimal.InvalidOperation, decimal.DivisionByZero])


@dataclass(frozen=True)
class Asset:
    """A fiat currency or a crypto-currency, with the number of decimal places it is kept to."""

    code: str
    places: int

    @property
    def quantum(self) -> Decimal:
        return Decimal(1).scaleb(-self.places)

    def down(self, amount: Decimal) -> Decimal:
        """Rounds towards negative infinity to this asset's precision."""
        return amount.quantize(self.quantum, rounding=ROUND_FLOOR, context=WIDE)

    def up(self, amount: Decimal) -> Decimal:
        """Rounds towards positive infinity to this asset's precision."""
        return amount.quantize(self.quantum, rounding=ROUND_CEILING, context=WIDE)

    def nearest(self, amount: Decimal) -> Decimal:
        """Rounds half away from zero to this asset's precision (the rule for fees)."""
        return amount.quantize(self.quantum, rounding=ROUND_HALF_UP, context=WIDE)

    def is_exact(self, amount: Decimal) -> bool:
        """Tells whether the amount needs no rounding at this asset's precision."""
        return amount == amount.quantize(self.quantum, rounding=ROUND_FLOOR, context=WIDE)

    def zero(self) -> Decimal:
        return Decimal(0).quantize(self.quantum)


def multiply(a: Decimal, b: Decimal) -> Decimal:
    """Exact product of two amounts (no rounding: the caller rounds with an asset's rule)."""
    return WIDE.multiply(a, b)


def divide(a: Decimal, b: Decimal) -> Decimal:
    """Quotient to 80 significant digits, for the caller to round with an asset's rule."""
    return WIDE.divide(a, b)


def add(*amounts: Decimal) -> Decimal:
    total = Decimal(0)
    for amount in amounts:
        total = WIDE.add(total, amount)
    return total


def subtract(a: Decimal, b: Decimal) -> Decimal:
    return WIDE.subtract(a, b)


def normalized(amount: Decimal) -> Decimal:
    """The same value without trailing zeros, for display (1.50000000 -> 1.5, 100 stays 100)."""
    if amount == amount.to_integral_value():
        return amount.quantize(Decimal(1))
    return amount.normalize(WIDE)


DOUBLE_DIGITS = decimal.Context(prec=15, rounding=decimal.ROUND_HALF_EVEN)


def as_a_double_carries(amount: Decimal) -> Decimal:
    """An amount that a client typed as a floating-point double, read at the 15 significant digits a double
    carries: 50.309999999999995 (the double nearest 50.31, printed in full) is 50.31, while 50.305 stays
    50.305, to be refused if its asset has two places. Exact from then on."""
    if not amount.is_finite():
        return amount
    return normalized(DOUBLE_DIGITS.plus(amount))
