"""The service keeps to its connection budget: `broker-ledger serve` (one worker, running the projections too)
holds at most 8 connections while idle, and under concurrent buys its pools hold at most
BROKER_LEDGER_DB_CONNECTIONS (8) plus one per projection it runs; every one of them says whose it is.

The server runs on a database of its own on the suite's server, so `pg_stat_activity` rows of that database
are all the service's; they are sampled every 20 ms while eight threads buy (with Idempotency-Keys) and read
back what they bought.
"""

from __future__ import annotations

import re
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import httpx
import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict

from application.store.database import APP_NAME, DEFAULT_CONNECTIONS
from tests.databases import scratch_database
from tests.e2e.support import (
    AddressSource,
    Api,
    active_customer,
    api_client,
    buy_body,
    client_secrets,
    obtain_token,
)
from tests.processes import running_server
from tests.receivers import wait_until
from tests.suite_server import ConnectionSampler

IDLE_BUDGET = 5  # serve, one worker, projections in-process, nothing asked of it
PEAK_BUDGET = DEFAULT_CONNECTIONS + 1  # its pools at their fullest, and the projections' one
TRADERS = 8
LOAD_SECONDS = 2.0  # 8 threads reach the pools' peak within a second; sampled every 20 ms
LAG = re.compile(r'^broker_ledger_projection_lag_events\{projection="[^"]+"\} (\S+)$', re.MULTILINE)


@pytest.fixture
def own_database(database_url: str) -> Iterator[str]:
    """A database of the test's own on the suite's server: the connections to it are the service's."""
    with scratch_database(database_url, "budget") as url:
        yield url


class Sampler:
    """Counts the connections to one database by application_name, as often as asked."""

    def __init__(self, observer: psycopg.Connection, dbname: str) -> None:
        self.observer = observer
        self.dbname = dbname
        self.peak: Counter[str] = Counter()

    def sample(self) -> Counter[str]:
        rows = self.observer.execute(
            "SELECT application_name, count(*) FROM pg_stat_activity WHERE datname = %s GROUP BY 1",
            (self.dbname,),
        ).fetchall()
        found = Counter(dict(rows))
        if found.total() > self.peak.total():
            self.peak = found
        return found


def caught_up(base_url: str) -> bool:
    """Every projection the server runs has applied every event (GET /metrics, on the server's own pool)."""
    lags = LAG.findall(httpx.get(f"{base_url}/metrics", timeout=10).text)
    return bool(lags) and all(float(lag) == 0 for lag in lags)


def trade(api: Api, customer: object, stop: threading.Event, outcomes: Counter[int]) -> None:
    while not stop.is_set():
        response = api.post_json("/brokerbuy", buy_body(customer, 25), {"Idempotency-Key": uuid.uuid4().hex})
        outcomes[response.status_code] += 1
        if response.status_code == 201:
            code = response.json()["transaction"]["transactionCode"]
            outcomes[api.get(f"/transactions/custodian/{code}").status_code] += 1


def test_serve_keeps_to_its_connection_budget_idle_and_under_concurrent_buys(
    own_database: str, database_url: str, tmp_path: Path
) -> None:
    dbname = psycopg.conninfo.conninfo_to_dict(own_database)["dbname"]
    var = tmp_path / "var"
    with (
        psycopg.connect(database_url, autocommit=True) as observer,
        running_server(own_database, var, tmp_path / "server.log", workers=1) as server,
    ):
        base_url = server.base_url
        sampler = Sampler(observer, dbname)
        secrets = client_secrets(var)
        token = obtain_token(base_url, "demo-broker", secrets["demo-broker"])
        addresses = AddressSource()
        with api_client(base_url, token) as broker:
            customers = [active_customer(broker, addresses(), trust_level="Plus") for _ in range(TRADERS)]
        assert wait_until(lambda: caught_up(base_url), timeout=30, interval=0.1), "the projections lag"
        idle = max((sampler.sample() for _ in range(10) if not time.sleep(0.1)), key=Counter.total)

        stop, outcomes = threading.Event(), Counter[int]()
        clients = [api_client(base_url, token) for _ in customers]
        threads = [
            threading.Thread(target=trade, args=(client, customer, stop, outcomes))
            for client, customer in zip(clients, customers, strict=True)
        ]
        for thread in threads:
            thread.start()
        deadline = time.monotonic() + LOAD_SECONDS
        while time.monotonic() < deadline:
            sampler.sample()
            time.sleep(0.02)
        stop.set()
        for thread in threads:
            thread.join(timeout=30)
        for client in clients:
            client.close()

    print(f"\nidle {idle.total()}: {dict(idle)}\npeak {sampler.peak.total()}: {dict(sampler.peak)}")
    print(f"outcomes: {dict(outcomes)}")
    assert outcomes[201] >= TRADERS, f"too few buys to measure anything: {dict(outcomes)}"
    assert set(outcomes) <= {200, 201}, f"requests failed under the budget: {dict(outcomes)}"
    unnamed = {name: n for name, n in sampler.peak.items() if not name.startswith(APP_NAME)}
    assert not unnamed, f"connections that do not say they are the service's: {unnamed}"
    assert idle.total() <= IDLE_BUDGET, f"idle: {idle.total()} connections > {IDLE_BUDGET}: {dict(idle)}"
    assert sampler.peak.total() <= PEAK_BUDGET, (
        f"peak: {sampler.peak.total()} connections > {PEAK_BUDGET}: {dict(sampler.peak)}"
    )


def next_samples(sampler: ConnectionSampler, count: int = 2) -> dict[str, int]:
    """The sampler's connections by database once it has sampled `count` more times."""
    target = sampler.samples + count
    deadline = time.monotonic() + 5
    while sampler.samples < target and time.monotonic() < deadline:
        time.sleep(0.05)
    assert sampler.samples >= target, f"the connection sampler stopped: {sampler.error}"
    return sampler.latest_by_database


def test_the_runs_sampler_counts_connections_to_databases_created_after_it_began(database_url: str) -> None:
    sampler = ConnectionSampler(database_url, "broker_test_none_of_ours_")
    sampler.start()
    try:
        next_samples(sampler)
        with scratch_database(database_url, "budget") as url:
            name = conninfo_to_dict(url)["dbname"]
            held = [psycopg.connect(url) for _ in range(3)]
            try:
                assert next_samples(sampler).get(name) == 3
            finally:
                for connection in held:
                    connection.close()
            assert name not in next_samples(sampler)
        assert sampler.peak >= 3
    finally:
        sampler.stop()
