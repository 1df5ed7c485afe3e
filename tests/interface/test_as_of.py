"""Any instant (issue 28): `asOf` on `GET /reserves`, `GET /customer/{code}/limits` and
`GET /transactions/custodian`, over HTTP on the real app in-process (projections on, a database of its own)
with a clock the tests move.

The end-to-end tests walk one history (an opening balance, a committed buy, a staged buy that expires) and
read each endpoint at instants before, between and after its changes; a malformed `asOf` is 400, the roles
are the history's (brokers and auditors; the operator also reads its reserves). The property test
(`test_as_of_equals_the_log_replayed_up_to_it`) makes 200 small random histories and checks every answer
`asOf` a random instant against the log replayed up to that instant (see its docstring).
"""

from __future__ import annotations

import bisect
import itertools
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import duckdb
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from application.credentials import VAR_ENV
from application.history import History
from application.store.database import DATABASE_URL_ENV
from bench.clock import FakeClock
from domain.limits import PERIODS, period_key
from domain.transaction import Status, TransactionType
from interface.cli.main import main as cli_main
from tests.e2e.support import AddressSource, Customer, buy_body, unique_code
from tests.in_process import InProcessClient, RoleCalls, in_process_app

CLOCK = FakeClock(datetime(2026, 5, 31, 23, 0, tzinfo=UTC))  # a day and a month end an hour later
# No sweep in the background: a staged buy lapses when a step asks for it (its commit refused), never between
# a read `asOf` and the replay it is compared with (the sweep records the lapse at the clock's time, before
# the instant read).
SWEEP = {"BROKER_LEDGER_EXPIRY_SWEEP_SECONDS": "3600"}
client = in_process_app(projections=True, own_database="broker_as_of", clock=CLOCK, env=SWEEP)
SECOND = timedelta(seconds=1)


def iso(at: datetime) -> str:
    return at.isoformat().replace("+00:00", "Z")


class Ledger(RoleCalls):
    """The app's test client, the clock, and the headers of each role."""

    def customer(self, addresses: AddressSource, trust_level: str = "Basic") -> Customer:
        code = unique_code("asof")
        self.call("broker", "POST", "/customer", {"customerCode": code, "trustLevel": trust_level})
        self.call("broker", "PUT", f"/customer/{code}", {"status": "ACTIVE"})
        address = addresses()
        account = self.call(
            "broker", "POST", f"/customer/{code}/accounts", {"customerCryptoAddress": address}
        )
        return Customer(code, account["accountCode"], address, account["dcReceiveAddress"])

    def opening(self, code: str, amount: Decimal) -> None:
        reserve = (
            {"name": "hot-wallet", "type": "HotWallet"}
            if code == "BTC"
            else {"name": "bank", "type": "Exchange"}
        )
        body = {"kind": "OpeningBalance", "code": code, "amount": amount, "toReserve": reserve}
        self.call("operator", "POST", "/reserves/adjustments", body)

    def buy(self, customer: Customer, fiat: Decimal, stage: bool = False) -> str:
        body = buy_body(customer, fiat, stage=stage or None)
        return self.call("broker", "POST", "/brokerbuy", body)["transaction"]["transactionCode"]


@pytest.fixture(scope="module")
def ledger(client: InProcessClient) -> Ledger:
    roles = {"broker": "demo-broker", "operator": "demo-operator", "auditor": "demo-auditor"}
    return Ledger(client, {role: client.headers_of(name) for role, name in roles.items()})


@pytest.fixture(scope="module")
def addresses() -> AddressSource:
    return AddressSource()


# --- one history, read at its instants ------------------------------------------------------------------


@dataclass(frozen=True)
class Walk:
    customer: Customer
    committed: str
    staged: str
    times: list[datetime]  # before anything, opening, buy committed, staged, expired


@pytest.fixture(scope="module")
def walk(ledger: Ledger, addresses: AddressSource) -> Walk:
    times = [CLOCK.now()]
    customer = ledger.customer(addresses)
    times.append(CLOCK.advance(minutes=1))
    ledger.opening("BTC", Decimal(5))
    times.append(CLOCK.advance(minutes=1))
    committed = ledger.buy(customer, Decimal(100))
    times.append(CLOCK.advance(minutes=1))
    staged = ledger.buy(customer, Decimal(50), stage=True)
    times.append(CLOCK.advance(hours=2))  # past the staged buy's validity, and into the next day
    ledger.call("broker", "POST", f"/transactions/custodian/{staged}/commit", status=409)
    return Walk(customer, committed, staged, times)


def hot_wallet(reserves: dict[str, Any]) -> dict[str, Any]:
    return next(r for r in reserves["cryptoReserves"] if r["name"] == "hot-wallet" and r["code"] == "BTC")


def test_reserves_as_of_each_instant(ledger: Ledger, walk: Walk) -> None:
    before, opened, committed, staged, expired = walk.times
    at = {t: hot_wallet(ledger.call("auditor", "GET", f"/reserves?asOf={iso(t)}")) for t in walk.times}
    assert at[before]["total"] == 0 and at[before]["updated"] is None
    assert at[opened]["total"] == 5 and at[opened]["locked"] == 0
    assert at[committed]["total"] == 5 and at[committed]["locked"] > 0
    assert at[staged] == at[committed] == at[expired]  # a staged buy posts nothing
    now = hot_wallet(ledger.call("broker", "GET", "/reserves"))
    assert at[expired] == now
    between = hot_wallet(ledger.call("operator", "GET", f"/reserves?asOf={iso(committed - SECOND)}"))
    assert between == at[opened]


def test_limits_as_of_each_instant(ledger: Ledger, walk: Walk) -> None:
    before, _opened, committed, staged, expired = walk.times
    path = f"/customer/{walk.customer.code}/limits"

    def used(at: datetime, role: str = "broker") -> dict[tuple[str, str], Decimal]:
        body = ledger.call(role, "GET", f"{path}?asOf={iso(at)}")
        assert body["customerCode"] == walk.customer.code
        return {(x["direction"], x["period"]): Decimal(str(x["used"])) for x in body["limits"]}

    assert used(committed - SECOND)["buy", "daily"] == 0
    assert used(committed)["buy", "daily"] == 100
    assert used(staged, "auditor")["buy", "monthly"] == 150  # the staged buy holds its amount
    assert used(expired)["buy", "daily"] == 0  # the next day's window
    assert used(expired)["buy", "monthly"] == 0  # the next month's, too
    assert used(staged + timedelta(minutes=40))["buy", "daily"] == 150  # past validity, not yet expired
    now = {(x["direction"], x["period"]): x["used"] for x in ledger.call("broker", "GET", path)["limits"]}
    assert now == {key: 0 for key in now}
    body = ledger.call("broker", "GET", f"{path}?asOf={iso(before - timedelta(days=1))}", status=404)
    assert body["code"] == "customer_not_found"


def test_transaction_list_as_of_each_instant(ledger: Ledger, walk: Walk) -> None:
    _before, opened, committed, staged, expired = walk.times
    base = f"/transactions/custodian?customerCode={walk.customer.code}"

    def listed(at: datetime, extra: str = "", role: str = "auditor") -> list[tuple[str, str]]:
        page = ledger.call(role, "GET", f"{base}&asOf={iso(at)}{extra}")
        assert page["total"] == len(page["records"])
        return [(tx["transactionCode"], tx["status"]) for tx in page["records"]]

    assert listed(opened) == []
    assert listed(committed) == [(walk.committed, "Sending")]
    assert listed(staged, role="broker") == [(walk.staged, "Staged"), (walk.committed, "Sending")]
    assert listed(expired) == [(walk.staged, "CANCELLED"), (walk.committed, "Sending")]
    assert listed(expired, "&status=Staged") == []
    assert listed(expired - SECOND, "&status=Staged") == [(walk.staged, "Staged")]
    page = ledger.call("broker", "GET", f"{base}&asOf={iso(staged)}&pageSize=1&page=2")
    assert page["total"] == 2 and [tx["transactionCode"] for tx in page["records"]] == [walk.committed]
    then = ledger.call("broker", "GET", f"/transactions/custodian/{walk.staged}/history?asOf={iso(staged)}")
    shown = ledger.call("broker", "GET", f"{base}&asOf={iso(staged)}")["records"][0]
    assert shown == then["transaction"]  # each shown as the history shows it then


@pytest.mark.parametrize(
    "path",
    [
        "/reserves",
        "/customer/{customer}/limits",
        "/transactions/custodian",
        "/transactions/custodian/x/history",
    ],
)
@pytest.mark.parametrize("value", ["2026-05-31", "2026-05-31T12:00:00", "yesterday", "2026-13-01T00:00:00Z"])
def test_a_malformed_as_of_is_400_as_for_the_history(
    ledger: Ledger, walk: Walk, path: str, value: str
) -> None:
    url = path.format(customer=walk.customer.code)
    answer = ledger.client.get(url, params={"asOf": value}, headers=ledger.headers["broker"])
    assert answer.status_code == 400, answer.text
    body = answer.json()
    assert body["code"] == "malformed_request" and "asOf" in body["detail"]


def test_the_roles_of_as_of_are_the_historys(ledger: Ledger, walk: Walk) -> None:
    at = iso(walk.times[-1])
    code = walk.customer.code
    ledger.call("operator", "GET", f"/customer/{code}/limits?asOf={at}", status=403)
    ledger.call("operator", "GET", f"/transactions/custodian?asOf={at}")
    ledger.call("operator", "GET", f"/transactions/custodian/{walk.staged}/history?asOf={at}")
    ledger.call("auditor", "GET", f"/customer/{code}/limits?asOf={at}")
    anonymous = ledger.client.get(f"/reserves?asOf={at}", headers={"api_version": "1"})
    assert anonymous.status_code == 401


# --- the property: asOf equals the log replayed up to the instant ----------------------------------------

STEPS = st.lists(
    st.tuples(
        st.integers(min_value=0, max_value=36 * 60),  # minutes the clock moves first (0: the same instant)
        st.sampled_from(["buy", "staged", "expire", "opening"]),
        st.integers(min_value=10, max_value=40),  # EUR of a buy, or thousands of satoshis of an opening
    ),
    min_size=1,
    max_size=2,
)


@dataclass
class Histories:
    """What the generated histories made so far: the customer (a new one every 40 histories, each
    customer's list staying within a page), its transactions, and the staged buys not yet expired."""

    customer: Customer | None = None
    codes: list[str] = field(default_factory=list)
    staged: list[str] = field(default_factory=list)
    count: int = 0


@pytest.fixture(scope="module")
def histories() -> Histories:
    return Histories()


def test_as_of_equals_the_log_replayed_up_to_it(
    ledger: Ledger, addresses: AddressSource, histories: Histories, walk: Walk
) -> None:
    """For each of 200 random histories (1 or 2 steps: a committed buy, a staged buy, the expiry of a
    staged one, an opening balance; the clock moved 0 to 36 hours before each, so windows of days and
    months change), at a random instant from its start (before its first step) to a minute after its last:

    - the list `asOf` (of the history's customer) is its transactions replayed from their events up to the
      instant (created by then, status then, in the list's order);
    - the limits `asOf` are those replayed transactions' amounts, summed per direction over the ones not
      cancelled then, in the window of the instant's day and month: the log replayed by another road
      than the windows' own events;
    - the reserves `asOf` are what `GET /reserves` answered right after the last step at or before the
      instant: the postings projection's replay of the log as it stood then (at its start, the reserves
      of before it).
    """
    history = History(ledger.client.app.state.runtime.ledger.store)

    @settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    @given(steps=STEPS, pick=st.floats(min_value=0, max_value=1))
    def check(steps: list[tuple[int, str, int]], pick: float) -> None:
        if histories.count % 40 == 0:
            histories.customer, histories.codes, histories.staged = ledger.customer(addresses, "Plus"), [], []
        histories.count += 1
        start = CLOCK.now()
        moves = (timedelta(minutes=m + (31 if a == "expire" else 0)) for m, a, _ in steps)
        instants = list(itertools.accumulate(moves, initial=start))
        span = instants[-1] - start + timedelta(minutes=1)
        ats = [(start + span * pick).replace(microsecond=0)]
        last_step_of = {at: bisect.bisect_right(instants, at) - 1 for at in ats}
        wanted = set(last_step_of.values())  # the reserves are read only after the steps an instant needs
        reserves = {0: ledger.call("broker", "GET", "/reserves")} if 0 in wanted else {}
        for number, (_, action, amount) in enumerate(steps, start=1):
            CLOCK.set(instants[number])
            take_step(ledger, histories, action, amount)
            if number in wanted:
                reserves[number] = ledger.call("broker", "GET", "/reserves")
        for at in ats:
            assert ledger.call("auditor", "GET", f"/reserves?asOf={iso(at)}") == reserves[last_step_of[at]]
            check_list_and_limits(ledger, history, histories, at)

    check()


def take_step(ledger: Ledger, histories: Histories, action: str, amount: int) -> None:
    assert histories.customer is not None
    if action == "opening":
        ledger.opening("BTC", Decimal(amount) / 100_000)
    elif action == "expire" and histories.staged:
        code = histories.staged.pop()  # the clock has passed its validity (31 minutes more)
        ledger.call("broker", "POST", f"/transactions/custodian/{code}/commit", status=409)
    elif action in ("buy", "staged"):
        code = ledger.buy(histories.customer, Decimal(amount), stage=action == "staged")
        histories.codes.append(code)
        if action == "staged":
            histories.staged.append(code)


def check_list_and_limits(ledger: Ledger, history: History, histories: Histories, at: datetime) -> None:
    assert histories.customer is not None
    customer = histories.customer.code
    then = history.transactions_at("demo", histories.codes, at)
    then.sort(key=lambda tx: (tx.created, tx.code), reverse=True)
    page = ledger.call(
        "auditor", "GET", f"/transactions/custodian?customerCode={customer}&asOf={iso(at)}&pageSize=200"
    )
    assert [(tx["transactionCode"], tx["status"]) for tx in page["records"]] == [
        (tx.code, tx.status.value) for tx in then
    ]
    limits = ledger.call("broker", "GET", f"/customer/{customer}/limits?asOf={iso(at)}", status=None)
    used = {(x["direction"], x["period"]): Decimal(str(x["used"])) for x in limits["limits"]}
    for direction, period in itertools.product(("buy", "sell"), PERIODS):
        key = period_key(period, at)
        held = [
            tx.order.limit_amount
            for tx in then
            if tx.status != Status.CANCELLED
            and period_key(period, tx.created) == key
            and (tx.order.type == TransactionType.BUY) == (direction == "buy")
        ]
        assert used[direction, period] == sum(held, Decimal(0)), (direction, period, at)


def test_a_period_export_reconciles_with_the_reserves_as_of_its_ends(
    ledger: Ledger, walk: Walk, client: InProcessClient, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`broker-ledger export` of the walk's period: each reserve's opening and closing balance in the
    Parquet file is the total `GET /reserves?asOf=` answers at the period's ends, read back with DuckDB."""
    start, end = walk.times[1] - SECOND, walk.times[3]
    # the reserves first: a read waits for the partner's last write, so the postings hold the walk
    ends = {moment: ledger.call("auditor", "GET", f"/reserves?asOf={iso(moment)}") for moment in (start, end)}
    monkeypatch.setenv(DATABASE_URL_ENV, client.database_url)
    monkeypatch.setenv(VAR_ENV, str(client.var))
    out = tmp_path / "export"
    argv = ["export", "--partner", "demo", "--from", iso(start), "--to", iso(end), "--format", "parquet"]
    with pytest.raises(SystemExit) as exited:
        cli_main([*argv, "--out", str(out)])
    assert exited.value.code == 0
    rows = duckdb.sql(
        f"SELECT reserve, currency_code, opening, closing FROM '{out / 'balances.parquet'}'"
    ).fetchall()
    assert any(opening != closing for _, _, opening, closing in rows), "the period moved the reserves"
    for reserve, code, opening, closing in rows:
        for moment, balance in ((start, opening), (end, closing)):
            listed = ends[moment]["cryptoReserves"] + ends[moment]["currencyReserves"]
            total = next((r["total"] for r in listed if r["name"] == reserve and r["code"] == code), 0)
            assert balance == total, (reserve, code, moment)
