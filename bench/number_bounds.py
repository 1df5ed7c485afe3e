"""What reading a hostile body costs: the time `interface.http.bodies.decode_body` takes to refuse the bodies
of
issue 25 (huge numbers, 5,000-digit integers, deep nesting, a 64 KiB body of brackets), next to an ordinary
buy, and the time the amount rules take on the largest number within the bounds.

Run:

    .venv/bin/python bench/number_bounds.py [--repeat 200]

Nothing is started: no server, no database. Prints per body the best and the median time of --repeat
decodes in microseconds and how it was answered (decoded, or the refusal's kind and first words: a
`BodyInvalid` is answered 422 `validation_failed`, a `RequestRefused` with its own status).
Before the bounds, the first body took 6.3 s and 8-12 GB through the whole request; the target is a few ms.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from decimal import Decimal

from litestar.exceptions import HTTPException

from domain.errors import DomainError
from domain.money import Asset
from domain.pricing import check_amount
from interface.http.bodies import decode_body
from interface.idempotency.keys import MAX_BODY
from interface.transactions.shapes import BrokerBuyCreate

BUY = (
    '{"customerCode":"alice","currencyCode":"EUR","cryptoCode":"BTC","fiatValue":%s,'
    '"destinationAddress":"bc1qw508d6qejxtdg4y5r3zarvary0c5xw7kv8f3t4","paymentMethodCode":"BANK_EUR_BUY"}'
)
BODIES = {
    "an ordinary buy": (BUY % "100").encode(),
    "fiatValue 1E+999999999": (BUY % "1E+999999999").encode(),
    "fiatValue 1e-999999999": (BUY % "1e-999999999").encode(),
    "fiatValue 1e999999999999999999999": (BUY % "1e999999999999999999999").encode(),
    "fiatValue of 5,000 digits": (BUY % ("1" + "0" * 4999)).encode(),
    "fiatValue of 60,000 decimals": (BUY % ("0." + "1" * 60_000)).encode(),
    "960 nested lists": b"[" * 960 + b"]" * 960,
    "64 KiB of brackets": b"[" * (MAX_BODY // 2) + b"]" * (MAX_BODY // 2),
    "64 KiB of escaped quotes, unterminated": b"[" * 40 + b'"' + b'\\"' * (MAX_BODY // 2 - 21),
}


def answer(body: bytes) -> str:
    try:
        decode_body(body, BrokerBuyCreate)
    except HTTPException as refused:
        return f"{type(refused).__name__}: {refused.detail[:60]}"
    return "decoded"


def timed(run: Callable[[], object], repeat: int) -> tuple[float, float]:
    """Best and median time of `repeat` runs, in microseconds."""
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        run()
        times.append((time.perf_counter() - start) * 1e6)
    return min(times), statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=200)
    repeat = parser.parse_args().repeat
    for name, body in BODIES.items():
        best, median = timed(lambda body=body: answer(body), repeat)
        print(f"{name:<38} {len(body):>7} B  best {best:>9.1f} us  median {median:>9.1f} us  {answer(body)}")
    for amount in ("9" * 14 + "." + "9" * 18, "9" * 30 + "." + "9" * 30):
        best, median = timed(lambda amount=amount: _judged(Decimal(amount)), repeat)
        name = f"amount rules on {amount[:10]}..."
        print(
            f"{name:<38} {'':>9}  best {best:>9.1f} us  median {median:>9.1f} us  {_judged(Decimal(amount))}"
        )


def _judged(amount: Decimal) -> str:
    try:
        check_amount(Asset("ETH", 18), amount, "cryptoAmount")
    except DomainError as refused:
        return refused.detail
    return "accepted"


if __name__ == "__main__":
    main()
