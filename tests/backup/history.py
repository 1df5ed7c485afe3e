"""The drill's history and what it notes of the live ledger: trading rounds through the app in-process (the
flows of tests/resilience/trading.py: buys sent out, sells paid and paid out, a BLOCKED one, the operator's
moves between the hot wallet and a cold store), and at each instant the database's clock, the audit chain's
head and, once the history is over, the live service's `asOf` answers at it.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import Any

import psycopg

from application.store.restores import written
from tests.e2e.support import (
    AddressSource,
    Api,
    Customer,
    active_customer,
    api_client,
    client_secrets,
    expect,
    obtain_token,
)
from tests.in_process import AppTransport, InProcessClient
from tests.resilience.replicas import wait_for_projections
from tests.resilience.trading import (
    BANK,
    HOT,
    Expected,
    adjustment,
    buy_and_send_out,
    move_and_back,
    sell_and_pay_out,
)

CAUGHT_UP_SECONDS = 60
PAGE = 200  # the largest page
FUNDING = ((HOT, "BTC", Decimal(100)), (BANK, "EUR", Decimal(1_000_000)))
HEAD = "SELECT seq, notification_id, chain_hash FROM read.audit_chain ORDER BY seq DESC LIMIT 1"
ADDRESSES = AddressSource()


def role_client(client: InProcessClient, client_id: str) -> Api:
    token = obtain_token(client, client_id, client_secrets(client.var)[client_id])
    return api_client("http://ledger.test", token, transport=AppTransport(client))


@dataclass
class Answers:
    """What the ledger answers, as compared: the reserves, the transaction list, each customer's limits
    (the status and body, 404 for a customer not registered yet)."""

    reserves: Any
    transactions: Any
    limits: dict[str, tuple[int, Any]]


def read_answers(broker: Api, customers: list[str], as_of: datetime | None) -> Answers:
    query = {} if as_of is None else {"asOf": written(as_of)}
    reserves = expect(broker.get("/reserves", params=query), 200)
    transactions = expect(broker.get("/transactions/custodian", params={"pageSize": PAGE, **query}), 200)
    assert transactions["totalPages"] <= 1, "the drill's history fits one page"
    limits = {}
    for code in customers:
        answer = broker.get(f"/customer/{code}/limits", params=query)
        limits[code] = (answer.status_code, answer.json() if answer.status_code == 200 else None)
    return Answers(reserves, transactions, limits)


@dataclass
class Instant:
    """An instant of the history: the database's clock then, and the chain's head (seq, notification id,
    hash) then."""

    at: datetime
    head: tuple[int, int, str]
    live: Answers | None = None


@dataclass
class LiveLedger:
    """The live service in-process on the archiving cluster's database, and the customers it made."""

    client: InProcessClient
    database_url: str
    customers: list[Customer] = field(default_factory=list)
    expected: Expected = field(default_factory=Expected)

    def __post_init__(self) -> None:
        self.broker = role_client(self.client, "demo-broker")
        self.operator = role_client(self.client, "demo-operator")
        self.cold = (f"cold-{uuid.uuid4().hex[:8]}", "ColdStore")

    def fund(self) -> None:
        for reserve, asset, amount in FUNDING:
            body = adjustment("OpeningBalance", asset, amount, reserve)
            expect(self.operator.post_json("/reserves/adjustments", body), 201)

    def trade(self, round_number: int) -> None:
        """A round: a new customer buys (staged every other round), the first customer sells (one BLOCKED in
        round 2), the operator moves BTC to a cold store and back."""
        customer = active_customer(self.broker, ADDRESSES())
        self.customers.append(customer)
        seller = self.customers[0]
        buy_and_send_out(self.broker, self.operator, customer, self.expected, staged=round_number % 2 == 1)
        sell_and_pay_out(self.broker, self.operator, seller, self.expected, block=False)
        if round_number == 2:
            sell_and_pay_out(self.broker, self.operator, seller, self.expected, block=True)
        move_and_back(self.operator, self.cold, self.expected)

    def note(self) -> Instant:
        """The instant now, once the projections hold every event, with a transaction recorded after it: a
        recovery to the instant stops at the first transaction after it."""
        _, positions, head = wait_for_projections(self.database_url, CAUGHT_UP_SECONDS)
        assert min(positions.values()) >= head, f"projections at {positions}, the log at {head}"
        with psycopg.connect(self.database_url, autocommit=True) as connection:
            at = connection.execute("SELECT clock_timestamp()").fetchone()[0]
            chain_head = connection.execute(HEAD).fetchone()
            connection.execute("SELECT txid_current()")
        return Instant(at, tuple(chain_head))

    def answers_as_of(self, instant: Instant) -> Answers:
        return read_answers(self.broker, [customer.code for customer in self.customers], instant.at)

    def close(self) -> None:
        self.broker.close()
        self.operator.close()
