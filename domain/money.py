"""Money: Decimal amounts, assets with their precision, and every rounding rule of the service.

All rounding in the service happens here. A fiat amount is rounded to its currency's minor unit, a crypto
amount to its precision. Calculations run in a wide decimal context so that an 18-decimal ETH amount
multiplied by a price never loses a digit before the rule rounds it.

A number read from a request is bounded before anything computes with it (`within_bounds`): at most
DIGITS_BEFORE_POINT digits before the decimal point and DIGITS_AFTER_POINT after it, as written. Every amount
the ledger keeps fits (below 10^15, at most 18 decimals), so does a double's 17 significant digits down to
10^-13, and WIDE rounds any such number to any asset's scale without an overflow or an invalid operation. A
refusal quotes an amount by `quoted`, never more than QUOTED_CHARACTERS characters of it.
"""

from __future__ import annotations

import decimal
from dataclasses import dataclass
from decimal import ROUND_CEILING, ROUND_FLOOR, ROUND_HALF_UP, Decimal

WIDE = decimal.Context(prec=80, traps=[decimal.InvalidOperation, decimal.DivisionByZero])
DIGITS_BEFORE_POINT = 30
DIGITS_AFTER_POINT = 30
NUMBER_BOUNDS = (
    f"at most {DIGITS_BEFORE_POINT} digits before the decimal point and {DIGITS_AFTER_POINT} after it"
)
QUOTED_CHARACTERS = 40
_LEADING_DIGITS = 12  # of an amount quoted in scientific notation


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

    def written(self, amount: Decimal | int | None) -> Decimal | None:
        """An amount written at this asset's scale (fiat at its minor unit, crypto at its precision), so that
        every amount of one asset has the same number of decimals in an answer; a value with more digits
        than the scale (a requested price, say) is written as it is, not rounded. A plain int (0 when a
        limit window is still unused) is written at the scale too."""
        if amount is None:
            return None
        scaled = Decimal(amount).quantize(self.quantum, context=WIDE)
        return scaled if scaled == amount else Decimal(amount)


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
        return amount.quantize(Decimal(1), context=WIDE)
    return amount.normalize(WIDE)


def within_bounds(number: Decimal | int) -> bool:
    """Whether a number read from a request is small enough to compute with: finite, with at most
    DIGITS_BEFORE_POINT digits before the decimal point and DIGITS_AFTER_POINT after it as written
    (`1E+30` has 31 before it, `1.50` two after it)."""
    if isinstance(number, int):
        return -(10**DIGITS_BEFORE_POINT) < number < 10**DIGITS_BEFORE_POINT
    if not number.is_finite():
        return False
    _, digits, exponent = number.as_tuple()  # a finite number's exponent is an int
    return len(digits) + exponent <= DIGITS_BEFORE_POINT and -exponent <= DIGITS_AFTER_POINT


def quoted(amount: Decimal) -> str:
    """An amount as a refusal quotes it: as written in plain notation when that is short, else its leading
    digits and its magnitude (`1.23456789012...E+999999999`); never over QUOTED_CHARACTERS characters, and
    never the work of writing out a huge number."""
    if not amount.is_finite():
        return str(amount)
    if within_bounds(amount):
        plain = f"{amount:f}"
        if len(plain) <= QUOTED_CHARACTERS:
            return plain
    sign, digits, _ = amount.as_tuple()
    leading = "".join(str(digit) for digit in digits[:_LEADING_DIGITS])
    more = "..." if len(digits) > _LEADING_DIGITS else ""
    fraction = f".{leading[1:]}{more}" if len(leading) > 1 else ""
    return f"{'-' if sign else ''}{leading[0]}{fraction}E{amount.adjusted():+d}"


DOUBLE_DIGITS = decimal.Context(prec=15, rounding=decimal.ROUND_HALF_EVEN)


def as_a_double_carries(amount: Decimal) -> Decimal:
    """An amount that a client typed as a floating-point double, read at the 15 significant digits a double
    carries: 50.309999999999995 (the double nearest 50.31, printed in full) is 50.31, while 50.305 stays
    50.305, to be refused if its asset has two places. Exact from then on."""
    if not within_bounds(amount):
        return amount  # as it is, for the amount rules to refuse
    return normalized(DOUBLE_DIGITS.plus(amount))
