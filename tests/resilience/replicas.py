"""What the two-replica test watches and sends: a watcher that samples `pg_locks` and `pg_stat_activity` of
the database, and races of buys for a customer near its daily limit sent through both replicas at once.

The watcher tells which process holds a projection's advisory lock, and how many connections each one
keeps, by the client ports of the backends.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from decimal import Decimal

import httpx
import psutil
import psycopg
from psycopg.conninfo import conninfo_to_dict

from projections.base.runner import APPLICATION, open_view
from projections.catalog import PROJECTIONS
from tests.e2e.support import (
    Api,
    active_customer,
    api_client,
    buy_body,
    describe,
    expect,
    expect_problem,
    limits_used,
)
from tests.resilience.load import ADDRESSES
from tests.resilience.trading import CONFIRMED, Expected

WATCH_INTERVAL_SECONDS = 0.01
ADVISORY_LOCKS = """SELECT l.classid::bigint, l.objid::bigint, l.pid, a.client_port
FROM pg_locks AS l LEFT JOIN pg_stat_activity AS a ON a.pid = l.pid
WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())"""
CONNECTIONS = """SELECT client_port FROM pg_stat_activity
WHERE datname = current_database() AND pid <> pg_backend_pid() AND backend_type = 'client backend'"""


def lock_tag(key: int) -> tuple[int, int]:
    """A bigint advisory lock key as pg_locks shows it: (classid, objid), its high and low 32 bits."""
    unsigned = key & 0xFFFF_FFFF_FFFF_FFFF
    return unsigned >> 32, unsigned & 0xFFFF_FFFF


@dataclass
class Watch:
    """A thread sampling, every few milliseconds until `stop()`, which backends hold each projection's
    advisory lock and how many connections each process has open. A backend is told to be a process's by
    its client port (`pg_stat_activity.client_port`, found among the process's sockets), whatever
    application name the process gives its connections."""

    database_url: str
    processes: Callable[[], dict[str, int | None]]  # name -> OS pid of each process started
    samples: int = 0
    overlaps: list[str] = field(default_factory=list)  # a projection's lock held by two backends at once
    holders: dict[str, Counter] = field(default_factory=lambda: defaultdict(Counter))  # name -> process -> n
    peak_by_process: Counter = field(default_factory=Counter)
    peak_total: int = 0  # every client backend of the database but the watcher's own
    errors: list[BaseException] = field(default_factory=list)
    _ports: dict[int, str] = field(default_factory=dict)
    _stopping: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def __post_init__(self) -> None:
        self.names = {lock_tag(spec.lock_key()): spec.name for spec in PROJECTIONS}
        self.server_port = int(conninfo_to_dict(self.database_url).get("port") or 5432)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def _run(self) -> None:
        try:
            with psycopg.connect(self.database_url, autocommit=True, connect_timeout=10) as connection:
                while not self._stopping.is_set():
                    self.sample(connection)
                    time.sleep(WATCH_INTERVAL_SECONDS)
        except BaseException as error:
            self.errors.append(error)

    def owner(self, port: int | None) -> str:
        """The name of the process whose connection leaves from `port` ("test": this one's)."""
        if port is None:
            return "unknown"
        if port not in self._ports:
            self._ports = self._map_ports()
        return self._ports.get(port, "unknown")

    def _map_ports(self) -> dict[int, str]:
        found = {}
        for name, pid in {**self.processes(), "test": os.getpid()}.items():
            if pid is None:
                continue
            with contextlib.suppress(psutil.Error):
                for conn in psutil.Process(pid).net_connections(kind="tcp"):
                    if conn.raddr and conn.raddr.port == self.server_port:
                        found[conn.laddr.port] = name
        return found

    def sample(self, connection: psycopg.Connection) -> None:
        held: dict[str, list[tuple[int, str]]] = defaultdict(list)
        for classid, objid, pid, port in connection.execute(ADVISORY_LOCKS).fetchall():
            name = self.names.get((classid, objid))
            if name is not None:
                held[name].append((pid, self.owner(port)))
        for name, backends in held.items():
            self.holders[name][backends[0][1]] += 1
            if len(backends) > 1 and len(self.overlaps) < 20:
                self.overlaps.append(f"sample {self.samples}: {name} held by {backends}")
        ports = [row[0] for row in connection.execute(CONNECTIONS).fetchall()]
        counts = Counter(self.owner(port) for port in ports)
        for owner, count in counts.items():
            self.peak_by_process[owner] = max(self.peak_by_process[owner], count)
        self.peak_total = max(self.peak_total, len(ports))
        self.samples += 1


def head(database_url: str) -> int:
    with psycopg.connect(database_url, autocommit=True, connect_timeout=10) as connection:
        return connection.execute(
            "SELECT coalesce(max(notification_id), 0) FROM ledger.ledger_events"
        ).fetchone()[0]


def positions(database_url: str) -> dict[str, int]:
    """Each projection's position in the event log, from its own tracking table."""
    found = {}
    for spec in PROJECTIONS:
        view = open_view(database_url, spec)
        try:
            found[spec.name] = view.position(APPLICATION) or 0
        finally:
            view.datastore.close()
    return found


def wait_for_projections(database_url: str, bound: float) -> tuple[float, dict[str, int], int]:
    """Waits (up to `bound` s) until every projection has processed the whole log as it stands now;
    returns the seconds that took, the positions and the log's head."""
    began, last = time.monotonic(), head(database_url)
    found = positions(database_url)
    while min(found.values()) < last and time.monotonic() < began + bound:
        time.sleep(0.2)
        found = positions(database_url)
    return time.monotonic() - began, found, last


# --- a customer near its limit, buys through both replicas at once -------------------------------------

RACE_BUYS = 16
RACE_FIAT = Decimal(100)
OPENING_FIAT = Decimal(700)


@dataclass
class LimitRaces:
    """Rounds of: a new Basic customer (daily buy limit 1000 EUR) buys 700, then 16 buys of 100 are sent
    at once, half through each replica; exactly 3 must be admitted. Each admitted buy is then sent out, so
    the reserves end as the flows moved them (added to `expected`)."""

    base_urls: tuple[str, str]
    broker_token: str
    operator: Api
    expected: Expected
    limit: Decimal
    rounds: int = 0
    admitted: Counter = field(default_factory=Counter)  # admitted per round -> rounds
    problems: list[str] = field(default_factory=list)
    customers: dict[str, int] = field(default_factory=dict)  # code -> buys admitted in all
    statuses: Counter = field(default_factory=Counter)

    def run_round(self, round_number: int) -> None:
        first, second = (
            self.base_urls if round_number % 2 == 0 else reversed(self.base_urls)  # type: ignore[misc]
        )
        with api_client(first, self.broker_token) as broker:
            customer = active_customer(broker, ADDRESSES(), "Basic")
            opening = expect(broker.post_json("/brokerbuy", buy_body(customer, OPENING_FIAT)), 201)
        self.complete(opening["transaction"])
        responses = race(self.base_urls, self.broker_token, buy_body(customer, RACE_FIAT))
        fits = int((self.limit - OPENING_FIAT) // RACE_FIAT)
        created = self.check_race(responses, fits)
        for transaction in created:
            self.complete(transaction)
        self.customers[customer.code] = 1 + len(created)
        used = OPENING_FIAT + RACE_FIAT * len(created)
        for base_url in (first, second):
            with api_client(base_url, self.broker_token) as broker:
                seen = limits_used(broker, customer.code)["buy", "daily"]
            if seen != used or seen > self.limit:
                self.problems.append(f"{customer.code} via {base_url}: used {seen}, admitted {used}")
        self.rounds += 1
        self.admitted[len(created)] += 1

    def check_race(self, responses: list[httpx.Response], fits: int) -> list[dict]:
        self.statuses.update(response.status_code for response in responses)
        created = [expect(r, 201)["transaction"] for r in responses if r.status_code == 201]
        for response in responses:
            if response.status_code != 201:
                expect_problem(response, 422, "trust_level_limit_exceeded")
        if len(created) != fits:
            self.problems.append(f"{len(created)} of {len(responses)} admitted, {fits} fit: {created}")
        return created

    def complete(self, transaction: dict) -> None:
        code = transaction["transactionCode"]
        sendout = {"transactionCode": code, "txId": f"out-{code}", "confirmations": CONFIRMED}
        done = expect(self.operator.post_json("/chain/sendouts", sendout), 200)["transaction"]
        assert done["status"] == "COMPLETED", done
        sent = Decimal(transaction["executedAmounts"]["cryptoAmount"])
        sent += Decimal(transaction["fees"]["networkFeeCrypto"])
        fiat = Decimal(transaction["executedAmounts"]["fiatValue"])
        self.expected.add("limit race buy", hot_wallet_BTC=-sent, bank_EUR=fiat)


def race(base_urls: tuple[str, str], token: str, body: dict) -> list[httpx.Response]:
    """Sends `body` RACE_BUYS times at once, alternately through each replica, each from its own client."""
    start = threading.Barrier(RACE_BUYS)

    def send(number: int) -> httpx.Response:
        with api_client(base_urls[number % 2], token) as client:
            start.wait()
            response = client.post_json("/brokerbuy", body)
        assert response.status_code < 500, describe(response)
        return response

    with ThreadPoolExecutor(RACE_BUYS) as pool:
        return list(pool.map(send, range(RACE_BUYS)))


def buys_in_read_model(database_url: str, customers: list[str]) -> dict[str, int]:
    """customer code -> buys `read.transactions` holds for it."""
    with psycopg.connect(database_url, autocommit=True, connect_timeout=10) as connection:
        rows = connection.execute(
            "SELECT customer_code, count(*) FROM read.transactions WHERE customer_code = ANY(%s)"
            " AND type = 'BROKERBUY' GROUP BY 1",
            (customers,),
        ).fetchall()
    return dict(rows)
