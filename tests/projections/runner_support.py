"""What the tests of projection runners share: the projections' positions and rows as the live `read` schema
holds them, and buys with a callback URL sent to a real server, in a thread, until told to stop. (The
`projections run` process itself is `tests.processes.ProjectionsRun`.)"""

from __future__ import annotations

import threading
import time
from decimal import Decimal
from typing import Any

import psycopg
from psycopg import sql

from projections import status
from projections.base.postgres import READ_SCHEMA
from projections.callbacks.projection import CallbackOutbox
from projections.catalog import PROJECTIONS
from tests.e2e.support import Api, Customer, buy_body, expect
from tests.projections.stall_support import head_of

NAMES = [spec.name for spec in PROJECTIONS]
OUTBOX_COLUMNS = (  # what the projection writes of a delivery (the rest is the delivery worker's)
    "event_id, partner, transaction_id, transaction_code, sequence, transaction_status, url, topic, version,"
    " state, created, notification_id"
)


def positions(url: str) -> dict[str, int]:
    with psycopg.connect(url, autocommit=True) as conn:
        return status.positions(conn, NAMES)


def all_at_head(url: str) -> bool:
    return set(positions(url).values()) == {head_of(url)}


def projection_rows(url: str) -> dict[str, list[tuple[Any, ...]]]:
    """Every table each projection writes in the `read` schema, row by row (of the callback outbox, the
    columns the projection writes: the delivery worker's change as it delivers)."""
    found = {}
    with psycopg.connect(url, autocommit=True) as conn:
        for spec in PROJECTIONS:
            for table in spec.view_class.tables:
                statement = sql.SQL("SELECT * FROM {} AS t ORDER BY t::text")
                found[table] = conn.execute(statement.format(sql.Identifier(READ_SCHEMA, table))).fetchall()
            if spec.view_class is CallbackOutbox:
                statement = sql.SQL("SELECT " + OUTBOX_COLUMNS + " FROM {} ORDER BY event_id")
                outbox = sql.Identifier(READ_SCHEMA, "callback_outbox")
                found["callback_outbox"] = conn.execute(statement.format(outbox)).fetchall()
    return found


class Buying:
    """Buys with a callback URL, each completed by a confirmed sendout, through the HTTP API, one after the
    other, `pause` seconds apart, in a thread until the block ends; `codes` are those completed. (Unpaced, a
    one-worker server completes some 80 a second: a customer's daily limit in six seconds.)"""

    def __init__(
        self, broker: Api, operator: Api, customer: Customer, callback_url: str, pause: float = 0.05
    ) -> None:
        self.broker, self.operator, self.customer = broker, operator, customer
        self.callback_url = callback_url
        self.pause = pause
        self.codes: list[str] = []
        self.errors: list[BaseException] = []
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._buy, name="buying", daemon=True)

    def _buy(self) -> None:
        try:
            while not self._stopping.is_set():
                body = buy_body(self.customer, Decimal(20), callbackUrl=self.callback_url)
                code = expect(self.broker.post_json("/brokerbuy", body), 201)["transaction"][
                    "transactionCode"
                ]
                sendout = {"transactionCode": code, "txId": f"out-{code}", "confirmations": 2}
                expect(self.operator.post_json("/chain/sendouts", sendout), 200)
                self.codes.append(code)
                self._stopping.wait(self.pause)
        except BaseException as error:
            self.errors.append(error)

    def wait_for(self, count: int, seconds: float = 30) -> None:
        """Until `count` buys are completed."""
        deadline = time.monotonic() + seconds
        while len(self.codes) < count and not self.errors:
            assert time.monotonic() < deadline, f"{len(self.codes)} buys in {seconds} s"
            time.sleep(0.02)
        assert not self.errors, self.errors

    def __enter__(self) -> Buying:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stopping.set()
        self._thread.join(timeout=60)
        assert not self.errors, self.errors
