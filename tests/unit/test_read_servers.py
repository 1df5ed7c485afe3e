"""Reads served by the read servers (BROKER_LEDGER_READ_DATABASE_URL), in memory: the setting as the
environment gives it, and the rule a read follows, with fake views and pools: the partner's last write is
read on the primary, the read servers serve the read once they hold it within the wait, else the primary
does within what is left of the same bound, else 503 `read_model_behind`.

On PostgreSQL standbys under Patroni: tests/ha/test_reads_from_standbys.py."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict

from interface.cli.export import read_url as export_url
from interface.environment import Environment
from interface.http.problems import ApiProblem
from interface.http.read_your_writes import ReadPools, TrackedView, holding_last_write
from interface.shared.transaction_reading import Reader

WAIT = 0.2  # seconds: the tests' bound of a read's wait


# --- the setting ---


def test_unset_every_read_goes_to_the_database_urls_server() -> None:
    environment = Environment.read({"DATABASE_URL": "postgresql://u@h/d"})
    assert environment.read_database_url == ""
    assert environment.read_servers_url is None


def test_the_read_servers_url_is_completed_by_the_pg_variables_and_kept_out_of_the_repr() -> None:
    url = " postgresql://u@h1:5001,h2:5002/d?target_session_attrs=prefer-standby&load_balance_hosts=random "
    environment = Environment.read({"BROKER_LEDGER_READ_DATABASE_URL": url, "PGPASSWORD": "secret"})
    assert environment.read_database_url == url.strip()
    assert environment.read_servers_url is not None
    params = conninfo_to_dict(environment.read_servers_url)
    assert (params["host"], params["port"], params["dbname"]) == ("h1,h2", "5001,5002", "d")
    assert params["target_session_attrs"] == "prefer-standby"
    assert params["load_balance_hosts"] == "random"
    assert params["password"] == "secret"
    assert params["connect_timeout"] == "3"  # as the main URL: a hung server is given up after 3 s
    assert "h1" not in repr(environment) and "secret" not in repr(environment)


def test_an_export_reads_on_the_read_servers_when_they_are_set() -> None:
    primary = "postgresql://u@h1/d?target_session_attrs=read-write"
    standbys = "postgresql://u@h2,h3/d?target_session_attrs=prefer-standby"
    assert "h1" in export_url(Environment.read({"DATABASE_URL": primary}))
    both = Environment.read({"DATABASE_URL": primary, "BROKER_LEDGER_READ_DATABASE_URL": standbys})
    assert conninfo_to_dict(export_url(both))["host"] == "h2,h3"


# --- the read models' reads (Reader) ---


@dataclass(frozen=True)
class Lent:
    """A connection of a fake pool: the server's name and the how-manieth connection it lent."""

    name: str
    number: int


class Connections:
    """A view's pool on a server called `name`: each loan a new connection; `faulty` refuses them all."""

    def __init__(self, name: str, faulty: bool) -> None:
        self.name = name
        self.faulty = faulty
        self.lent = 0
        self.opened = False  # as eventsourcing's: opened by the first loan of its datastore

    def open(self, wait: bool = False, timeout: float = 30.0) -> None:
        self.opened = True

    @contextmanager
    def connection(self, timeout: float | None = None) -> Iterator[Lent]:
        if not self.opened:
            raise psycopg.OperationalError(f"the pool of {self.name} is not open yet")
        if self.faulty:
            raise psycopg.OperationalError(f"{self.name} refuses connections")
        self.lent += 1
        yield Lent(self.name, self.lent)


class View:
    """A view of the read models at `position`, on a server called `name` (its own datastore, with a pool
    as eventsourcing's: `get_connection` lends from `pool`); `faulty` raises as a standby that cannot be
    reached; `waited` records each wait it was asked for (position, seconds, the connection it waited on)."""

    def __init__(self, name: str, position: int, faulty: bool = False) -> None:
        self.name = name
        self.position = position
        self.pool: Any = Connections(name, faulty)
        self.waited: list[tuple[int, float, int]] = []
        self.datastore = self

    @contextmanager
    def get_connection(self) -> Iterator[Lent]:
        self.pool.open()
        with self.pool.connection() as conn:
            yield conn

    def caught_up(self, notification_id: int, timeout: float) -> bool:
        with self.get_connection() as conn:
            self.waited.append((notification_id, timeout, conn.number))
        if self.position < notification_id and timeout > 0:
            time.sleep(timeout)  # waits the whole bound, in vain
        return self.position >= notification_id


class Positions:
    """The partners' last writes, as read on the connection each lookup names."""

    def __init__(self, **positions: int) -> None:
        self.positions = positions
        self.read_on: list[str] = []

    def last(self, conn: Any, partner: str) -> int:
        self.read_on.append(conn.name)
        return self.positions.get(partner, 0)


def reader(standby: View, primary: View, positions: Positions) -> Reader:
    return Reader(None, standby, positions, WAIT, lambda: False, primary=primary)  # type: ignore[arg-type]


def view_of(read_models: Reader, partner: str = "demo") -> Any:
    with read_models.holding(partner) as view:
        return view


def test_a_read_is_served_by_a_standby_that_holds_the_partners_last_write() -> None:
    standby, primary, positions = View("standby", 42), View("primary", 42), Positions(demo=42)
    assert view_of(reader(standby, primary, positions)) is standby
    assert positions.read_on == ["primary"]  # never a standby's copy: a lagging one shows an older write
    assert primary.waited == []


def test_a_read_on_a_standby_waits_and_reads_on_one_of_its_connections() -> None:
    """With load_balance_hosts=random a pool's connections go to different standbys: a wait on one and a
    read on another could miss the write."""
    standby, primary = View("standby", 42), View("primary", 42)
    read_models = reader(standby, primary, Positions(demo=42))
    with (
        read_models.holding("demo") as view,
        view.datastore.get_connection() as first,
        view.datastore.get_connection() as second,
    ):
        assert first.number == second.number == standby.waited[-1][2]
    assert standby.pool.pool.lent == 1
    with standby.datastore.get_connection() as outside:  # other reads, after: the pool lends as it does
        assert outside.number == 2


def test_a_standby_behind_the_write_past_the_wait_hands_the_read_to_the_primary_within_the_same_bound(
    caplog: pytest.LogCaptureFixture,
) -> None:
    standby, primary = View("standby", 10), View("primary", 42)
    began = time.monotonic()
    assert view_of(reader(standby, primary, Positions(demo=42))) is primary
    assert time.monotonic() - began < WAIT + 0.1
    assert [(at, seconds) for at, seconds, _ in standby.waited] == [
        (42, 0.0),
        (42, pytest.approx(WAIT, abs=0.05)),
    ]
    assert primary.waited[0][:2] == (42, 0.0)  # reached at once: what was left of the bound was not needed
    assert "the primary serves the read" in caplog.text


def test_a_read_neither_a_standby_nor_the_primary_holds_in_time_is_refused() -> None:
    standby, primary = View("standby", 10), View("primary", 20)
    began = time.monotonic()
    with pytest.raises(ApiProblem) as refused, reader(standby, primary, Positions(demo=42)).held("demo"):
        pass
    assert refused.value.status_code == 503 and refused.value.code == "read_model_behind"
    assert time.monotonic() - began < WAIT + 0.1  # one bound for both, not one each
    assert all(seconds <= WAIT for _, seconds, _ in primary.waited)


def test_a_standby_that_cannot_be_reached_hands_the_read_to_the_primary() -> None:
    standby, primary = View("standby", 42, faulty=True), View("primary", 42)
    assert view_of(reader(standby, primary, Positions(demo=42))) is primary


def test_a_partner_that_has_written_nothing_reads_on_a_standby_at_once() -> None:
    standby, primary = View("standby", 0), View("primary", 0)
    assert view_of(reader(standby, primary, Positions()), "newcomer") is standby
    assert standby.waited == []


def test_without_read_servers_the_primarys_view_serves_every_read() -> None:
    primary, positions = View("primary", 42), Positions(demo=42)
    only = Reader(None, primary, positions, WAIT, lambda: False)  # type: ignore[arg-type]
    assert view_of(only) is primary and only.primary_view is primary
    assert positions.read_on == ["primary"]
    assert only.standby_connections is None and isinstance(primary.pool, Connections)


# --- the postings' reads on pools (holding_last_write: the reserves, the reconciliation) ---


class Pool:
    """A pool whose one connection is itself, a server called `name` at `position`."""

    def __init__(self, name: str, position: int, faulty: bool = False) -> None:
        self.name = name
        self.position = position
        self.faulty = faulty
        self.lent = 0

    @contextmanager
    def connection(self) -> Iterator[Pool]:
        if self.faulty:
            raise psycopg.OperationalError(f"{self.name} refuses connections")
        self.lent += 1
        yield self


def reached(conn: Pool, position: int, seconds: float) -> bool:
    if conn.position < position and seconds > 0:
        time.sleep(seconds)
    return conn.position >= position


POSTINGS = TrackedView("ledger postings", reached, lambda conn: False)


def pools(primary: Pool, standby: Pool | None = None) -> ReadPools:
    return ReadPools(primary, standby)  # type: ignore[arg-type]


def holding(read_pools: ReadPools, positions: Positions) -> Any:
    return holding_last_write(read_pools, positions, "demo", WAIT, POSTINGS, "the reserves")  # type: ignore[arg-type]


def served_by(read_pools: ReadPools, positions: Positions) -> str:
    with holding(read_pools, positions) as conn:
        return conn.name


def test_the_postings_are_read_on_a_standby_that_holds_the_write_else_on_the_primary() -> None:
    primary, positions = Pool("primary", 42), Positions(demo=42)
    assert served_by(pools(primary, Pool("standby", 42)), positions) == "standby"
    assert served_by(pools(primary, Pool("standby", 41)), positions) == "primary"
    assert served_by(pools(primary, Pool("down", 42, faulty=True)), positions) == "primary"
    assert positions.read_on == ["primary", "primary", "primary"]


def test_postings_behind_on_every_server_are_refused_within_one_bound() -> None:
    began = time.monotonic()
    with pytest.raises(ApiProblem) as refused:
        served_by(pools(Pool("primary", 41), Pool("standby", 40)), Positions(demo=42))
    assert refused.value.code == "read_model_behind" and "ledger postings" in refused.value.detail
    assert time.monotonic() - began < WAIT + 0.1


def test_without_read_servers_one_connection_finds_the_write_and_serves_the_read() -> None:
    primary, positions = Pool("primary", 42), Positions(demo=42)
    assert served_by(pools(primary), positions) == "primary"
    assert primary.lent == 1 and positions.read_on == ["primary"]


def test_an_error_of_the_read_itself_is_the_callers_not_a_reason_to_read_elsewhere() -> None:
    primary, standby = Pool("primary", 42), Pool("standby", 42)
    with pytest.raises(ZeroDivisionError), holding(pools(primary, standby), Positions(demo=42)):
        raise ZeroDivisionError
    assert (primary.lent, standby.lent) == (1, 1)  # the primary's for the write's position only
