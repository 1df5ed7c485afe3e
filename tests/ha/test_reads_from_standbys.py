"""Reads served by PostgreSQL standbys keep read-your-writes (issue 36, the reads' part).

One topology for the module (tests/ha/conftest.py) and two apps in-process on it, as two workers would be:
the writer, whose DATABASE_URL lists the three servers with `target_session_attrs=read-write` and which runs
the projections, and the reader, with the same DATABASE_URL and BROKER_LEDGER_READ_DATABASE_URL listing the
two standbys only (`prefer-standby`). A buy written through the writer is read at once through the reader:
the list, the transaction, the reserves, the reserves asOf and the reconciliation show it, served by a
standby (the reader's connections there say so, and no read was handed to the primary). With the standbys'
WAL replay paused, the same reads wait out the bound on the standby and are served by the primary, within
the same bound. The partners' write positions are on the standbys too (a logged table, as a failover needs).
"""

from __future__ import annotations

import csv
import json
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import psycopg
import pytest

from application.settings import load_settings
from interface.app import Runtime
from interface.cli.export import export
from interface.environment import READ_DATABASE_URL_ENV
from interface.shared.transaction_reading import DEFAULT_WAIT_SECONDS
from tests.e2e.support import (
    AddressSource,
    Api,
    Customer,
    active_customer,
    api_client,
    buy_body,
    client_secrets,
    expect,
    obtain_token,
)
from tests.ha.cluster import Cluster, Node
from tests.in_process import AppTransport, InProcessClient, app_client

DATABASE = "ledger_reads"
LIST = "/transactions/custodian"
NETWORK_FEE = load_settings().cryptos["BTC"].network_fee
FALLBACK = "the primary serves the read"  # what the reader logs when a standby does not serve a read in time
ON_STANDBYS = "broker-ledger standby "  # how the names of the reader's connections to the standbys begin
SLACK_SECONDS = 1.5  # beyond the bound: the request's own work, on a test machine
ROUNDS = 5  # writes read back at once through the reader


@dataclass
class Apps:
    writer: Api  # demo-broker, on the app that writes (and projects) on the primary
    reader: Api  # demo-broker, on the app that reads from the standbys
    auditor: Api  # demo-auditor, on the reader
    runtime: Runtime  # the reader's
    cluster: Cluster
    primary: Node
    standbys: list[Node]


@pytest.fixture(scope="module")
def apps(ha_cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Apps]:
    ha_cluster.wait_healthy(30)
    primary = ha_cluster.leader()
    assert primary is not None, ha_cluster.describe()
    with psycopg.connect(ha_cluster.url(), autocommit=True, connect_timeout=5) as connection:
        connection.execute(f"CREATE DATABASE {DATABASE}")
    url = ha_cluster.url(DATABASE)
    standbys = [node for node in ha_cluster.nodes if node.name != primary.name]
    root = tmp_path_factory.mktemp("reads-from-standbys")
    with (
        app_client(url, root / "writer-var", projections=True) as writing,
        app_client(url, root / "reader-var", env={READ_DATABASE_URL_ENV: standbys_url(standbys)}) as reading,
        role(writing, "demo-broker") as writer,
        role(reading, "demo-broker") as reader,
        role(reading, "demo-auditor") as auditor,
    ):
        yield Apps(writer, reader, auditor, reading.app.state.runtime, ha_cluster, primary, standbys)


def standbys_url(standbys: list[Node]) -> str:
    """The read servers' URL, as an operator would write it: the standbys, any of them."""
    hosts = ",".join(f"127.0.0.1:{node.pg_port}" for node in standbys)
    return f"postgresql://postgres@{hosts}/{DATABASE}?target_session_attrs=prefer-standby&load_balance_hosts=random"


@contextmanager
def role(client: InProcessClient, client_id: str) -> Iterator[Api]:
    token = obtain_token(client, client_id, client_secrets(client.var)[client_id])
    with api_client(str(client.base_url), token, transport=AppTransport(client)) as api:
        yield api


def test_a_write_through_one_worker_is_read_at_once_through_another_on_a_standby(
    apps: Apps, caplog: pytest.LogCaptureFixture, report: Any
) -> None:
    customer = active_customer(apps.writer, AddressSource()())
    locked_before = hot_btc_locked(apps.reader)
    written: list[str] = []
    locks: list[Decimal] = []
    read_after: list[float] = []
    for _ in range(ROUNDS):  # each read on whichever standby its pool's connection went to (random)
        tx = buy(apps.writer, customer)
        written.insert(0, tx["transactionCode"])
        locks.append(locked_by(tx))
        began = time.monotonic()
        listed = expect(apps.reader.get(LIST, params={"customerCode": customer.code}), 200)
        read_after.append(time.monotonic() - began)
        assert [record["transactionCode"] for record in listed["records"]] == written
        assert expect(apps.reader.get(f"{LIST}/{tx['transactionCode']}"), 200)["transaction"] == tx
        assert hot_btc_locked(apps.reader) - locked_before == sum(locks)
    assert hot_btc_locked(apps.reader, at=datetime.now(UTC)) - locked_before == sum(locks)
    reconcile(apps.auditor)

    handed = [record.getMessage() for record in caplog.records if record.name == "broker_ledger.reading"]
    assert not handed, f"reads were handed to the primary: {handed}"
    assert standby_sessions(apps.standbys) >= {"standby read-models", "standby api", "standby heavy-reads"}
    assert not sessions(apps.primary, ON_STANDBYS), "the reader's standby connections went to the primary"
    server = served_by(apps.runtime)
    assert server in {node.pg_port for node in apps.standbys}
    kept = wait_for(lambda: kept_on_standbys(apps), "the standbys to have demo's write position")
    report(
        rounds=ROUNDS,
        read_after_write_ms=f"{min(read_after) * 1000:.0f}..{max(read_after) * 1000:.0f}",
        served_by_port=server,
        positions_on_standbys=kept,
    )


def test_a_read_falls_back_to_the_primary_when_the_standbys_cannot_catch_up_in_time(
    apps: Apps, caplog: pytest.LogCaptureFixture, report: Any
) -> None:
    customer = active_customer(apps.writer, AddressSource()())
    locked_before = hot_btc_locked(apps.reader)
    with replay_paused(apps.cluster, apps.standbys):
        tx = buy(apps.writer, customer)
        began = time.monotonic()
        listed = expect(apps.reader.get(LIST, params={"customerCode": customer.code}), 200)
        list_took = time.monotonic() - began
        began = time.monotonic()
        locked = hot_btc_locked(apps.reader)
        reserves_took = time.monotonic() - began
    assert [record["transactionCode"] for record in listed["records"]] == [tx["transactionCode"]]
    assert locked - locked_before == locked_by(tx)
    for took in (list_took, reserves_took):  # the bound on the standby, the primary then at once
        assert DEFAULT_WAIT_SECONDS - 0.1 <= took < DEFAULT_WAIT_SECONDS + SLACK_SECONDS, took
    assert caplog.text.count(FALLBACK) >= 2, caplog.text
    report(list_s=f"{list_took:.2f}", reserves_s=f"{reserves_took:.2f}", bound_s=DEFAULT_WAIT_SECONDS)


def test_an_export_reads_the_standbys(
    apps: Apps, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, report: Any
) -> None:
    """`broker-ledger export` with the reader's environment: its one read-only repeatable-read transaction
    runs on a standby (a hot standby takes it), and holds what the standby has replayed."""
    customer = active_customer(apps.writer, AddressSource()())
    tx = buy(apps.writer, customer)
    code = tx["transactionCode"]
    wait_for(lambda: all_or_none(apps.cluster, lambda node: listed_on(node, code), apps.standbys), "the buy")
    monkeypatch.setenv("DATABASE_URL", apps.runtime.database_url)
    monkeypatch.setenv(READ_DATABASE_URL_ENV, standbys_url(apps.standbys))
    now = datetime.now(UTC)
    began = (now - timedelta(hours=1)).isoformat()
    assert export(partner="demo", from_=began, to=now.isoformat(), format="csv", out=tmp_path) == 0
    with (tmp_path / "transactions.csv").open() as stream:
        codes = {row["transaction_code"] for row in csv.DictReader(stream)}
    assert code in codes
    report(exported_transactions=len(codes))


# --- what the tests do and look at ---


def buy(api: Api, customer: Customer) -> dict[str, Any]:
    return expect(api.post_json("/brokerbuy", buy_body(customer, "20")), 201)["transaction"]


def locked_by(tx: dict[str, Any]) -> Decimal:
    """What a buy locks in the hot wallet until its sendout: its crypto amount and the network fee."""
    return Decimal(tx["executedAmounts"]["cryptoAmount"]) + NETWORK_FEE


def hot_btc_locked(api: Api, at: datetime | None = None) -> Decimal:
    """The BTC locked in the partner's hot wallet: now (on the API's pools), or at `at` (the heavy reads')."""
    params = {} if at is None else {"asOf": at.isoformat()}
    body = expect(api.get("/reserves", params=params), 200)
    found = [item for item in body["cryptoReserves"] if (item["name"], item["code"]) == ("hot-wallet", "BTC")]
    assert len(found) == 1, body
    return Decimal(found[0]["locked"])


def reconcile(auditor: Api) -> None:
    now = datetime.now(UTC)
    period = {"from": (now - timedelta(hours=1)).isoformat(), "to": now.isoformat()}
    expect(auditor.get("/reconciliation", params=period), 200)


def served_by(runtime: Runtime) -> int:
    """The port of the server the reader's read models' view connects to (checked to be a standby)."""
    with runtime.reader.view.datastore.get_connection() as connection:
        row = connection.execute(
            "SELECT pg_is_in_recovery() AS standby, inet_server_port() AS port"
        ).fetchone()
    assert row is not None and row["standby"], "the read models' view is not on a standby"
    return row["port"]


def sessions(node: Node, prefix: str) -> set[str]:
    """The application names, beginning with `prefix`, of the connections to `node`'s ledger database."""
    with psycopg.connect(node.url(DATABASE), autocommit=True, connect_timeout=3) as connection:
        rows = connection.execute(
            "SELECT DISTINCT application_name FROM pg_stat_activity WHERE datname = %s"
            " AND application_name LIKE %s",
            (DATABASE, f"{prefix}%"),
        ).fetchall()
    return {name for (name,) in rows}


def standby_sessions(standbys: list[Node]) -> set[str]:
    """The reader's pools with connections on the standbys, by name (`standby read-models`, ...)."""
    names = set().union(*(sessions(node, ON_STANDBYS) for node in standbys))
    return {name.removeprefix("broker-ledger ") for name in names}


def kept_on_standbys(apps: Apps) -> int | None:
    """Demo's write position, once every standby has the primary's (None until then)."""
    found = {kept_position(node) for node in (apps.primary, *apps.standbys)}
    return found.pop() if len(found) == 1 else None


def listed_on(node: Node, code: str) -> bool:
    """Whether `node`'s read models show the transaction `code` (its replay has reached the projection's)."""
    with psycopg.connect(node.url(DATABASE), autocommit=True, connect_timeout=3) as connection:
        found = connection.execute("SELECT 1 FROM read.transactions WHERE transaction_code = %s", (code,))
        return found.fetchone() is not None


def kept_position(node: Node) -> int | None:
    with psycopg.connect(node.url(DATABASE), autocommit=True, connect_timeout=3) as connection:
        row = connection.execute("SELECT position FROM api.write_positions WHERE partner = 'demo'").fetchone()
    return None if row is None else row[0]


def wait_for(found: Any, what: str, timeout: float = 10.0) -> Any:
    deadline = time.monotonic() + timeout
    while (value := found()) is None:
        assert time.monotonic() < deadline, f"waited {timeout} s for {what}"
        time.sleep(0.05)
    return value


@contextmanager
def replay_paused(cluster: Cluster, standbys: list[Node]) -> Iterator[None]:
    """The standbys receive the primary's WAL (a commit still returns once the synchronous one has it) but
    replay none of it until the block ends: to them, the writes of the block have not happened yet. Patroni
    is in maintenance mode meanwhile: otherwise each standby's Patroni resumes a paused replay within a
    loop (`handle_parameter_change`, PostgreSQL 14 and later)."""
    maintenance(cluster, True)
    try:
        wait_for(lambda: all_or_none(cluster, lambda node: (node.api("patroni") or {}).get("pause")), "pause")
        for node in standbys:
            _on(node, "SELECT pg_wal_replay_pause()")
        wait_for(lambda: all_or_none(cluster, replay_paused_on, standbys), "the standbys' replay to pause")
        yield
    finally:
        for node in standbys:
            _on(node, "SELECT pg_wal_replay_resume()")
        maintenance(cluster, False)
        cluster.wait_healthy(30)


def maintenance(cluster: Cluster, on: bool) -> None:
    """Patroni's maintenance mode (`patronictl pause`/`resume`), through its REST API: no failover, and
    PostgreSQL left as it is."""
    request = urllib.request.Request(
        f"http://127.0.0.1:{cluster.nodes[0].api_port}/config",
        data=json.dumps({"pause": on}).encode(),
        method="PATCH",
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=5) as response:
        assert response.status == 200, response.read()


def all_or_none(cluster: Cluster, holds: Any, nodes: list[Node] | None = None) -> bool | None:
    return True if all(holds(node) for node in nodes or cluster.nodes) else None


def replay_paused_on(node: Node) -> bool:
    with psycopg.connect(node.url(), autocommit=True, connect_timeout=3) as connection:
        row = connection.execute("SELECT pg_get_wal_replay_pause_state()").fetchone()
    return row is not None and row[0] == "paused"


def _on(node: Node, statement: str) -> None:
    with psycopg.connect(node.url(), autocommit=True, connect_timeout=3) as connection:
        connection.execute(statement)
