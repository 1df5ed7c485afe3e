"""The floor of bench/load.py: the least the fixed stack does to store a request. A litestar POST endpoint
decodes the echo app's body and records it as a new aggregate's one event through eventsourcing, on the
service's own event-store settings (group commit included), in a worker thread as the service's handlers
run. No token, no Idempotency-Key, no domain rules, no read-ahead, no projections.

Every created buy does all of this and more, so on a given machine buys/s cannot pass this figure.

Run: DATABASE_URL=postgresql://... .venv/bin/python -m bench.floor_app --port 8002 --workers 2
"""

from __future__ import annotations

import os
from typing import Any

from eventsourcing.application import Application
from eventsourcing.domain import Aggregate, event
from litestar import Litestar, get, post

from application.store.database import ensure_schema, eventsourcing_env
from bench.echo_app import BuyBody, serve

SCHEMA = "floor"


class Order(Aggregate):
    @event("Placed")
    def __init__(self, body: dict[str, Any]) -> None:
        self.body = body


class Orders(Application):
    pass


def create_app() -> Litestar:
    url = os.environ["DATABASE_URL"]
    ensure_schema(url, SCHEMA)
    orders = Orders(env=eventsourcing_env(url, SCHEMA))

    @post("/brokerbuy", status_code=201, sync_to_thread=True)
    def place(data: BuyBody) -> dict[str, str]:
        order = Order({"customer": data.customer_code, "fiat": str(data.fiat_value)})
        orders.save(order)
        return {"id": str(order.id)}

    @get("/health", sync_to_thread=False)
    def health() -> dict[str, str]:
        return {"status": "ok"}

    return Litestar(route_handlers=[place, health], on_shutdown=[orders.close])


if __name__ == "__main__":
    serve("bench.floor_app:create_app", __doc__.splitlines()[0], 8002)
