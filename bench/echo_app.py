"""The ceiling of bench/load.py: a trivial litestar app whose POST endpoint decodes a small msgspec JSON body
(the shape of a buy request) and echoes it, served by uvicorn with the options `broker-ledger serve` uses.

Run: .venv/bin/python -m bench.echo_app --port 8001 --workers 2   (POST /brokerbuy echoes its body)
"""

from __future__ import annotations

import argparse
from decimal import Decimal

import msgspec
import uvicorn
from litestar import Litestar, post


class BuyBody(msgspec.Struct, kw_only=True, frozen=True, rename="camel", forbid_unknown_fields=True):
    customer_code: str
    currency_code: str
    crypto_code: str
    fiat_value: Decimal
    destination_address: str
    payment_method_code: str


@post("/brokerbuy", status_code=201)
async def echo(data: BuyBody) -> BuyBody:
    return data


def create_app() -> Litestar:
    return Litestar(route_handlers=[echo])


def serve(factory: str, description: str, default_port: int) -> None:
    """Runs the app `factory` ("module:function") under uvicorn with the options of interface/cli/serve.py,
    taking --port, --workers and --log-level from the command line (the floor app is served the same way)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--port", type=int, default=default_port)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--log-level", default="info")
    args = parser.parse_args()
    uvicorn.run(
        factory,
        factory=True,
        host="127.0.0.1",
        port=args.port,
        workers=args.workers,
        log_level=args.log_level,
        access_log=False,
        timeout_graceful_shutdown=10,
    )


if __name__ == "__main__":
    serve("bench.echo_app:create_app", __doc__.splitlines()[0], 8001)
