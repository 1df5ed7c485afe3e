"""The load the fault tests drive and what they check afterwards: buys under Idempotency-Keys, every answer
recorded; retries of the unanswered keys; what the event store holds for those keys.

Each load thread has a customer of its own (trust level Plus, so limits never refuse) and creates small buys,
each under a fresh key, until told to stop; after a failure it sends the same key and body again. A key is
*acknowledged* once a 2xx came back; a key still without one when the load stops (503, a time-out, a refused
connection) is *unsettled*, to be retried with the same key and body until it gets one.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

import httpx
import psycopg

from domain.transaction import Transaction
from interface.idempotency.keys import transaction_code_for
from tests.e2e.support import (
    PROBLEM_JSON,
    AddressSource,
    Api,
    Customer,
    active_customer,
    api_client,
    buy_body,
)

PARTNER = "demo"
CLIENT_TIMEOUT_SECONDS = 10.0
PAUSE_AFTER_FAILURE_SECONDS = 0.1
BUY_FIAT = Decimal(10)
READ_BACK_SAMPLE = 25
STAGED_TOPIC = "domain.transaction:Transaction.Staged"


@dataclass(frozen=True)
class Attempt:
    """One POST /brokerbuy: when it was sent (monotonic), how long it took, and what came back."""

    key: str
    sent: float
    seconds: float
    status: int | None = None  # None: no HTTP answer (time-out, refused or broken connection)
    code: str | None = None  # the problem's code
    retry_after: str | None = None
    problem_json: bool = False
    transaction_code: str | None = None
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.status is not None and 200 <= self.status < 300


def post_buy(api: Api, key: str, body: dict[str, Any]) -> Attempt:
    sent = time.monotonic()
    try:
        response = api.post_json("/brokerbuy", body, headers={"Idempotency-Key": key})
    except httpx.TransportError as error:
        return Attempt(key, sent, time.monotonic() - sent, error=f"{type(error).__name__}: {error}")
    seconds = time.monotonic() - sent
    problem_json = response.headers.get("content-type", "").startswith(PROBLEM_JSON)
    payload = _json_or_none(response)
    code = payload.get("code") if problem_json and isinstance(payload, dict) else None
    transaction = payload.get("transaction") if isinstance(payload, dict) else None
    return Attempt(
        key,
        sent,
        seconds,
        status=response.status_code,
        code=code,
        retry_after=response.headers.get("retry-after"),
        problem_json=problem_json,
        transaction_code=transaction.get("transactionCode") if isinstance(transaction, dict) else None,
    )


def _json_or_none(response: httpx.Response) -> Any:
    try:
        return response.json()
    except ValueError:
        return None


def _pause_after(attempt: Attempt) -> float:
    """A moment after a failure; Retry-After (at most 1 s) when the key's first request is still running."""
    if attempt.status == 409 and attempt.retry_after:
        return min(float(attempt.retry_after), 1.0)
    return PAUSE_AFTER_FAILURE_SECONDS


ADDRESSES = AddressSource()  # one for the session: every customer gets a wallet address of its own


def customers_for(api: Api, count: int) -> list[Customer]:
    """`count` new ACTIVE customers of partner demo, trust level Plus, each with a BTC account."""
    return [active_customer(api, ADDRESSES(), "Plus") for _ in range(count)]


@dataclass
class BuyLoad:
    """`len(customers)` threads creating buys under fresh keys until `stop()`; every attempt is kept."""

    base_url: str
    token: str
    customers: list[Customer]
    attempts: list[Attempt] = field(default_factory=list)
    bodies: dict[str, dict[str, Any]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _stopping: threading.Event = field(default_factory=threading.Event)
    _threads: list[threading.Thread] = field(default_factory=list)

    def __enter__(self) -> BuyLoad:
        for customer in self.customers:
            thread = threading.Thread(target=self._run, args=(customer,), daemon=True)
            self._threads.append(thread)
            thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()

    def stop(self) -> None:
        self._stopping.set()
        for thread in self._threads:
            thread.join(timeout=CLIENT_TIMEOUT_SECONDS + 5)

    def _run(self, customer: Customer) -> None:
        """As a careful client: a new key per buy; after a failure the same key again, a moment later."""
        with api_client(self.base_url, self.token) as api:
            api.timeout = httpx.Timeout(CLIENT_TIMEOUT_SECONDS)
            attempt = None
            while not self._stopping.is_set():
                if attempt is None or attempt.ok:
                    key = f"resilience-{uuid.uuid4().hex}"
                    body = buy_body(customer, BUY_FIAT)
                    with self._lock:
                        self.bodies[key] = body
                attempt = post_buy(api, key, body)
                with self._lock:
                    self.attempts.append(attempt)
                if not attempt.ok:
                    self._stopping.wait(_pause_after(attempt))

    def snapshot(self) -> list[Attempt]:
        with self._lock:
            return list(self.attempts)

    def acknowledged(self) -> dict[str, str]:
        """key -> transaction code of every key a 2xx answered."""
        return {a.key: a.transaction_code for a in self.snapshot() if a.ok}

    def unsettled(self) -> dict[str, dict[str, Any]]:
        """key -> body of every key that never got a 2xx."""
        answered = self.acknowledged()
        with self._lock:
            return {key: body for key, body in self.bodies.items() if key not in answered}

    def first_success_after(self, moment: float) -> float | None:
        """Seconds from `moment` to the answer of the first 2xx request sent after it (None: none yet)."""
        done = [a.sent + a.seconds for a in self.snapshot() if a.ok and a.sent >= moment]
        return min(done) - moment if done else None

    def wait_for_success_after(self, moment: float, bound: float) -> float | None:
        """Waits (up to `bound` seconds from `moment`) for a 2xx sent after `moment`; its delay or None."""
        while time.monotonic() < moment + bound:
            found = self.first_success_after(moment)
            if found is not None:
                return found
            time.sleep(0.05)
        return self.first_success_after(moment)


@dataclass
class Settlement:
    """What retrying the unsettled keys took: attempts per key and the statuses seen on the way."""

    codes: dict[str, str] = field(default_factory=dict)
    statuses: Counter = field(default_factory=Counter)
    left: dict[str, dict[str, Any]] = field(default_factory=dict)
    seconds: float = 0.0
    caught_up: float = 0.0  # seconds the read models then took to hold every buy


def settle(api: Api, unsettled: dict[str, dict[str, Any]], bound: float) -> Settlement:
    """Retries every key with its own body until a 2xx (honouring Retry-After, at most 1 s) or `bound`."""
    result = Settlement(left=dict(unsettled))
    began = time.monotonic()
    while result.left and time.monotonic() < began + bound:
        pause = 0.0
        for key, body in list(result.left.items()):
            attempt = post_buy(api, key, body)
            result.statuses[attempt.status or "no answer"] += 1
            if attempt.ok:
                result.codes[key] = attempt.transaction_code
                del result.left[key]
            elif attempt.retry_after:
                pause = max(pause, min(float(attempt.retry_after), 1.0))
        if result.left:
            time.sleep(pause or 0.2)
    result.seconds = time.monotonic() - began
    return result


def expected_code(key: str) -> str:
    return transaction_code_for(PARTNER, "/brokerbuy", key)


def transactions_in_store(database_url: str, customers: list[Customer]) -> Counter:
    """originator id -> creation events (a buy is Staged first) of the customers' transactions, read from
    the event store itself (`ledger.ledger_events`), not from a read model."""
    with psycopg.connect(database_url, connect_timeout=10) as connection:
        rows = connection.execute(
            "SELECT originator_id FROM ledger.ledger_events WHERE originator_version = 1 AND topic = %s"
            " AND convert_from(state, 'UTF8')::jsonb #>> '{order,customer_code}' = ANY(%s)",
            (STAGED_TOPIC, [customer.code for customer in customers]),
        ).fetchall()
    return Counter(row[0] for row in rows)


def check_in_store(database_url: str, customers: list[Customer], keys: set[str], only: bool = False) -> int:
    """Asserts that the event store holds a buy for each key (with `only`: and no other buy of these
    customers, each created once); returns how many buys of theirs it holds."""
    found = transactions_in_store(database_url, customers)
    wanted = {Transaction.create_id(PARTNER, expected_code(key)) for key in keys}
    missing = wanted - found.keys()
    assert not missing, f"{len(missing)} of {len(keys)} keys have no transaction in the event store"
    if only:
        extra = found.keys() - wanted
        twice = {id_ for id_, count in found.items() if count != 1}
        assert not extra, f"{len(extra)} buys in the event store belong to no key of this test"
        assert not twice, f"{len(twice)} transactions were created more than once"
    return sum(found.values())


def check_read_models_catch_up(api: Api, database_url: str, codes: set[str], bound: float) -> float:
    """Waits (up to `bound` s) until `read.transactions` holds every code, then reads a sample of them back
    over HTTP by code; returns the seconds the read models took to catch up."""
    began = time.monotonic()
    missing = set(codes)
    with psycopg.connect(database_url, autocommit=True, connect_timeout=10) as connection:
        while missing and time.monotonic() < began + bound:
            rows = connection.execute(
                "SELECT transaction_code FROM read.transactions WHERE partner = %s"
                " AND transaction_code = ANY(%s)",
                (PARTNER, sorted(missing)),
            ).fetchall()
            missing -= {row[0] for row in rows}
            if missing:
                time.sleep(0.1)
    caught_up = time.monotonic() - began
    assert not missing, (
        f"{len(missing)} of {len(codes)} buys never reached the read models: {sorted(missing)[:5]}"
    )
    for code in sorted(codes)[:READ_BACK_SAMPLE]:
        response = api.get(f"/transactions/custodian/{code}")
        assert response.status_code == 200, (code, response.status_code, response.text[:300])
        assert response.json()["transaction"]["transactionCode"] == code
    return caught_up


def failures(attempts: list[Attempt]) -> Counter:
    """The requests that got no HTTP answer, by kind of error (ReadTimeout, ConnectError, ...)."""
    return Counter(a.error.partition(":")[0] for a in attempts if a.error)


def tally(attempts: list[Attempt]) -> Counter:
    """Outcomes by kind: 2xx, 503, no answer, and any other status by number."""
    counted: Counter = Counter()
    for attempt in attempts:
        if attempt.ok:
            counted["2xx"] += 1
        elif attempt.status is None:
            counted["no answer"] += 1
        else:
            counted[str(attempt.status)] += 1
    return counted


def claims_of(database_url: str, keys: set[str]) -> list[tuple]:
    """The API's idempotency rows of these keys (state, lease, age), to tell why a retry was refused."""
    with psycopg.connect(database_url, connect_timeout=10) as connection:
        return connection.execute(
            "SELECT key, state, status, lease_until - now() AS lease_left, now() - created AS age"
            " FROM api.idempotency_keys WHERE key = ANY(%s)",
            (sorted(keys),),
        ).fetchall()


def check_every_key_buys_once(
    api: Api, database_url: str, load: BuyLoad, bound: float
) -> tuple[Settlement, int]:
    """The guarantees after a fault: every acknowledged buy is in the event store under the code its key
    gives; retrying every other key with its own body ends in a 2xx; then the store holds exactly one buy
    per key and no other, and every one of them reads back by code. Returns the retries and the buys."""
    acknowledged = load.acknowledged()
    assert all(code == expected_code(key) for key, code in acknowledged.items())
    check_in_store(database_url, load.customers, set(acknowledged))  # before any retry
    settled = settle(api, load.unsettled(), bound)
    assert not settled.left, (
        f"{len(settled.left)} keys never got a 2xx within {bound} s: {settled.statuses}; their claims:"
        f" {claims_of(database_url, set(settled.left))}"
    )
    assert all(code == expected_code(key) for key, code in settled.codes.items())
    keys = set(acknowledged) | set(settled.codes)
    buys = check_in_store(database_url, load.customers, keys, only=True)
    settled.caught_up = check_read_models_catch_up(api, database_url, {expected_code(k) for k in keys}, bound)
    return settled, buys
