"""`broker-ledger analyst publication --partner P`: a warehouse's PostgreSQL subscribes to the partner's rows
of the read tables and finds the same rows after a load, and none of another partner's."""

from __future__ import annotations

import time
from collections.abc import Iterator

import psycopg
import pytest

from application.credentials import VAR_ENV
from application.store.database import eventsourcing_env
from application.store.log import EVENTS_SCHEMA
from bench.history import Driver
from interface.cli.main import main
from projections.base.runner import open_view, replay
from projections.catalog import by_name
from tests.application.conftest import use_cases_of
from tests.projections.scenario import READ_MODELS, populate
from tests.resilience.cluster import ClusterUnavailable, PrivateCluster

COMPARED = (
    "customers",
    "accounts",
    "transactions",
    "transaction_status_history",
    "daily_volumes",
    "balances",
)


def run(*argv: str) -> int:
    with pytest.raises(SystemExit) as exit_:
        main(list(argv))
    return int(exit_.value.code or 0)


def cluster(*settings: str) -> PrivateCluster:
    made = PrivateCluster(max_connections=40)
    try:
        made.init()
        with (made.data / "postgresql.conf").open("a") as conf:
            conf.writelines(f"{line}\n" for line in settings)
        made.start()
    except ClusterUnavailable as error:
        made.destroy()
        pytest.skip(str(error))
    return made


@pytest.fixture
def servers() -> Iterator[tuple[PrivateCluster, PrivateCluster]]:
    """A publisher with wal_level = logical (the shared server may not have it) and a subscriber."""
    publisher = cluster("wal_level = logical", "max_wal_senders = 10", "max_replication_slots = 10")
    subscriber = cluster()
    try:
        yield publisher, subscriber
    finally:
        with psycopg.connect(subscriber.url(), autocommit=True) as conn:
            for (name,) in conn.execute("SELECT subname FROM pg_subscription").fetchall():
                conn.execute(f'DROP SUBSCRIPTION "{name}"')
        subscriber.destroy()
        publisher.destroy()


def rows(url: str, table: str) -> list[tuple[object, ...]]:
    with psycopg.connect(url) as conn:
        return sorted(conn.execute(f"SELECT * FROM read.{table}").fetchall(), key=repr)


def project(ledger, url: str) -> None:
    for spec in (READ_MODELS, by_name("Postings")):
        view = open_view(url, spec)
        replay(ledger, spec, view)
        view.datastore.close()


def load(drive: Driver) -> None:
    """Customers, buys and sells of both partners: rows inserted and updated (statuses move)."""
    drive.customer("demo", "carol")
    drive.customer("other", "dave")
    for number in range(5):
        buy = drive.buy("demo", "carol", str(20 + number))
        drive.use_cases.buys.commit("demo", buy.code)
        drive.sendout(buy, 2)
        drive.deposit(drive.sell("demo", "carol", "0.001"), 2)
        drive.buy("other", "dave", str(30 + number))


def test_an_unknown_partner_is_refused_with_exit_2(cli_database, capsys) -> None:
    assert run("analyst", "publication", "--partner", "nobody") == 2
    assert "unknown partner 'nobody'" in capsys.readouterr().err


def test_a_subscriber_finds_the_partners_rows_after_a_load_and_no_other_partners(
    servers, make_ledger, clock, addresses, tmp_path, monkeypatch, capsys
) -> None:
    publisher, subscriber = servers
    source, warehouse = publisher.url(), subscriber.url()
    with psycopg.connect(source, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {EVENTS_SCHEMA}")
    ledger = make_ledger(env={**eventsourcing_env(source, EVENTS_SCHEMA), "POSTGRES_POOL_SIZE": "2"})
    use_cases = use_cases_of(ledger)
    populate(use_cases, clock, addresses)
    project(ledger, source)
    monkeypatch.setenv("DATABASE_URL", source)
    monkeypatch.setenv(VAR_ENV, str(tmp_path / "var"))
    assert run("analyst", "publication", "--partner", "demo") == 0
    assert run("analyst", "publication", "--partner", "demo") == 0  # again: its tables set anew
    said = capsys.readouterr()
    assert "publication ledger_demo updated" in said.out and "read.transactions" in said.out
    assert "warning" not in said.err
    for spec in (READ_MODELS, by_name("Postings")):  # the warehouse's tables, empty
        open_view(warehouse, spec).datastore.close()
    with psycopg.connect(warehouse, autocommit=True) as conn:
        conn.execute(
            f"CREATE SUBSCRIPTION ledger_demo CONNECTION 'host=127.0.0.1 port={publisher.port} "
            "user=postgres dbname=postgres' PUBLICATION ledger_demo"
        )
    load(Driver(use_cases, clock, addresses))  # after the subscription: new rows, and changed ones
    project(ledger, source)

    def partners_rows(url: str, table: str, partner: str) -> list[tuple[object, ...]]:
        return [row for row in rows(url, table) if row[0] == partner]

    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if all(partners_rows(source, t, "demo") == rows(warehouse, t) for t in COMPARED):
            break
        time.sleep(0.5)
    for table in COMPARED:
        assert rows(warehouse, table) == partners_rows(source, table, "demo"), table
    assert len(rows(warehouse, "transactions")) > 10
    assert rows(warehouse, "assets") == rows(source, "assets") != []
