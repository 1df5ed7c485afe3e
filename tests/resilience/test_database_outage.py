"""PostgreSQL stopped hard (`pg_ctl stop -m immediate`) under a load of buys, and started again, round after
round, while the real server (`broker-ledger serve --workers 2`) keeps running.

While the database is down the service must answer 503 `database_unavailable` problems with a Retry-After,
promptly (no 500, no hang past the client's time-out); once it is back the service must recover by itself,
without a restart. Afterwards every buy that was acknowledged (2xx) is in the event store, and retrying every
other key with the same Idempotency-Key ends in a 2xx with exactly one transaction per key.

The first test (with --run-slow) asks without an Idempotency-Key (a buy, reads, /health) during one outage
longer than the client's time-out: each must get its 503 promptly. A keyed request that was already past its
claim when the database went away may still show as "no answer" (ReadTimeout) in the figures, and is retried
like any other.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import httpx
import pytest

from tests.e2e.support import PROBLEM_JSON, Api, buy_body, expect
from tests.resilience.cluster import PrivateCluster
from tests.resilience.conftest import Service
from tests.resilience.load import (
    CLIENT_TIMEOUT_SECONDS,
    Attempt,
    BuyLoad,
    check_every_key_buys_once,
    customers_for,
    failures,
    tally,
)

LOAD_THREADS = 4
UP_SECONDS = 0.5  # of load before each outage, and after the last: some 40 buys
# how long each round keeps the database down, in turn: CI's one round longer than the pools' 3 s wait for
# a connection (so requests both wait and get their 503), then (with --run-slow, which has more rounds)
# shorter than that wait, twice as long, and longer than the client's time-out
DOWN_SECONDS = (4.0, 3.0, 6.0, 12.0)
RECOVERY_BOUND_SECONDS = 20.0
SETTLE_BOUND_SECONDS = 30.0


@dataclass(frozen=True)
class Outage:
    stopped: float  # monotonic: `pg_ctl stop -m immediate` has returned
    restarted: float  # monotonic: `pg_ctl start -w` has returned
    recovery: float | None  # seconds from `restarted` to the answer of the first 2xx sent after it

    def covers(self, attempt: Attempt) -> bool:
        """The attempt was in flight while the database was down (sent during the outage, or before it and
        still unanswered when it began)."""
        return attempt.sent < self.restarted and attempt.sent + attempt.seconds >= self.stopped


def probe_health(base_url: str) -> str:
    """GET /health (no token) with the client's time-out: its status and how long it took, or the error."""
    sent = time.monotonic()
    try:
        status = httpx.get(f"{base_url}/health", timeout=CLIENT_TIMEOUT_SECONDS).status_code
    except httpx.TransportError as error:
        status = type(error).__name__
    return f"{status} in {time.monotonic() - sent:.1f} s"


def probe(api: Api, method: str, path: str, body: dict | None = None) -> Attempt:
    """One request without an Idempotency-Key, with the client's time-out."""
    sent = time.monotonic()
    try:
        response = api.send_json(method, path, body)
    except httpx.TransportError as error:
        return Attempt(f"{method} {path}", sent, time.monotonic() - sent, error=type(error).__name__)
    problem = response.headers.get("content-type", "").startswith(PROBLEM_JSON)
    return Attempt(
        f"{method} {path}",
        sent,
        time.monotonic() - sent,
        status=response.status_code,
        code=response.json().get("code") if problem else None,
        retry_after=response.headers.get("retry-after"),
        problem_json=problem,
    )


def break_the_database(cluster: PrivateCluster, load: BuyLoad, rounds: int) -> list[Outage]:
    """`rounds` times: let the load run, stop PostgreSQL hard, keep it down, start it, wait for a 2xx."""
    outages = []
    for number in range(rounds):
        time.sleep(UP_SECONDS)
        cluster.stop_hard()
        stopped = time.monotonic()
        time.sleep(DOWN_SECONDS[number % len(DOWN_SECONDS)])
        cluster.start()
        restarted = time.monotonic()
        recovery = load.wait_for_success_after(restarted, RECOVERY_BOUND_SECONDS)
        outages.append(Outage(stopped, restarted, recovery))
        assert recovery is not None, f"no buy succeeded within {RECOVERY_BOUND_SECONDS} s of the restart"
    time.sleep(UP_SECONDS)
    return outages


def check_answers_while_down(attempts: list[Attempt], outages: list[Outage]) -> list[Attempt]:
    """Every request sent while the database was down got an answer within the client's time-out: a 503
    problem with Retry-After, or (when the database came back meanwhile) a 2xx, or for a retried key whose
    first attempt's claim is not released yet a 409 `idempotency_request_in_progress` with Retry-After.
    No request got a 5xx other than 503; every 503 is `database_unavailable` with Retry-After. Returns the
    requests in flight while the database was down."""
    errors = [a for a in attempts if a.status is not None and a.status >= 500 and a.status != 503]
    assert not errors, f"{len(errors)} answers were 5xx other than 503, e.g. {errors[:3]}"
    for attempt in (a for a in attempts if a.status == 503):
        assert attempt.problem_json and attempt.code == "database_unavailable", attempt
        assert attempt.retry_after is not None and int(attempt.retry_after) > 0, attempt
    down = [a for a in attempts if any(outage.covers(a) for outage in outages)]
    assert down, "no request was in flight while the database was down"
    unanswered = [a for a in down if a.status is None]
    assert not unanswered, (
        f"{len(unanswered)} of {len(down)} requests sent while the database was down got no answer within "
        f"{CLIENT_TIMEOUT_SECONDS} s, e.g. {unanswered[:3]}"
    )
    in_progress = [a for a in down if a.status == 409]
    assert all(a.code == "idempotency_request_in_progress" and a.retry_after for a in in_progress), (
        in_progress
    )
    other = [a for a in down if not a.ok and a.status not in (503, 409)]
    assert not other, f"requests sent while the database was down got {tally(other)}, e.g. {other[:3]}"
    return down


@pytest.mark.slow  # an outage longer than the client's time-out: 12 s the suite's budget cannot spare
def test_requests_without_an_idempotency_key_get_a_prompt_503_while_the_database_is_down(
    service: Service, private_cluster: PrivateCluster, report
) -> None:
    with service.client() as broker:
        customer = customers_for(broker, 1)[0]
        created = expect(broker.post_json("/brokerbuy", buy_body(customer, 10)), 201)
    code = created["transaction"]["transactionCode"]
    requests = [
        ("POST", "/brokerbuy", buy_body(customer, 10)),
        ("GET", f"/customer/{customer.code}", None),
        ("GET", f"/transactions/custodian/{code}", None),
        ("GET", "/reserves", None),
    ]
    private_cluster.stop_hard()
    try:
        with ThreadPoolExecutor(max_workers=len(requests) + 1) as pool:
            health = pool.submit(probe_health, service.server.base_url)
            answers = [pool.submit(_probe_with_own_client, service, *request) for request in requests]
            attempts = [answer.result() for answer in answers]
            health_answer = health.result()
    finally:
        private_cluster.start()
    report(**{a.key: f"{a.status or a.error} in {a.seconds:.1f} s" for a in attempts}, health=health_answer)
    for attempt in attempts:
        assert attempt.status == 503, f"{attempt.key}: no 503 within {CLIENT_TIMEOUT_SECONDS} s: {attempt}"
        assert attempt.problem_json and attempt.code == "database_unavailable", attempt
        assert attempt.retry_after, attempt
    assert health_answer.startswith("503"), f"/health while the database is down: {health_answer}"


def _probe_with_own_client(service: Service, method: str, path: str, body: dict | None) -> Attempt:
    with service.client() as api:
        api.timeout = httpx.Timeout(CLIENT_TIMEOUT_SECONDS)
        return probe(api, method, path, body)


def test_acknowledged_buys_survive_hard_database_stops_and_retried_keys_buy_exactly_once(
    service: Service, private_cluster: PrivateCluster, rounds: int, report
) -> None:
    server_pid = service.server.process.pid
    with service.client() as broker:
        customers = customers_for(broker, LOAD_THREADS)
        with BuyLoad(service.server.base_url, service.tokens["demo-broker"], customers) as load:
            outages = break_the_database(private_cluster, load, rounds)
        assert service.server.alive() and service.server.process.pid == server_pid  # recovered by itself
        attempts = load.snapshot()
        down = check_answers_while_down(attempts, outages)
        settled, buys = check_every_key_buys_once(broker, service.database_url, load, SETTLE_BOUND_SECONDS)
    counted = tally(attempts)
    report(
        rounds=rounds,
        down_s=[DOWN_SECONDS[n % len(DOWN_SECONDS)] for n in range(rounds)],
        requests=len(attempts),
        ok_2xx=counted["2xx"],
        answers_503=counted["503"],
        answers_409=counted["409"],
        no_answer=dict(failures(attempts)),
        sent_while_down=len(down),
        slowest_while_down_s=round(max(a.seconds for a in down), 2),
        recovery_s=[round(o.recovery, 2) for o in outages],
        retried_keys=len(settled.codes),
        retry_statuses=dict(settled.statuses),
        settle_s=round(settled.seconds, 2),
        read_models_caught_up_s=round(settled.caught_up, 2),
        buys_in_store=buys,
    )
