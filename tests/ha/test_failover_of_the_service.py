"""The service follows the primary when PostgreSQL fails over under Patroni (issue 36, the service's part).

One topology for the module (tests/ha/conftest.py) and one real server (`broker-ledger serve --workers 2`)
whose DATABASE_URL lists the three servers with `target_session_attrs=read-write`. Keyed buys run while the
primary's PostgreSQL is killed (round 1) or its machine hung (round 2, Patroni and PostgreSQL stopped with
SIGSTOP); Patroni promotes the synchronous standby and the service, never restarted, goes on writing there.

Afterwards: every acknowledged buy is in the event store exactly once; retrying every other key with its
own Idempotency-Key ends in one buy per key; every buy's callback reaches its receiver (the outbox resumes on
the new primary); the read models catch up on the new primary; `audit verify`
passes (read models equal a rebuild, postings balance, the audit chain links every event); the old primary
rejoins as a standby with the same events; GET /health names the new primary. The figures: time without an
acknowledged buy (target < 30 s), requests answered 503 or not at all, acknowledged lost (0), duplicates (0).
"""

from __future__ import annotations

import os
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import psycopg
import pytest

from domain.transaction import Transaction
from interface.health.routes import database_server
from interface.health.shapes import DatabaseServer
from tests.e2e.support import Api, api_client, buy_body
from tests.ha import faults
from tests.ha.cluster import Cluster, Node
from tests.ha.faults import FAILOVER_WITHIN_SECONDS, REJOIN_WITHIN_SECONDS
from tests.ha.writer import longest_gap
from tests.processes import CLI_COMMAND, ROOT, ApiServer
from tests.receivers import Receiver, receiving, settings_with_callbacks, wait_until
from tests.resilience.load import (
    PARTNER,
    BuyLoad,
    check_every_key_buys_once,
    customers_for,
    expected_code,
    failures,
    post_buy,
    settle,
    tally,
    transactions_in_store,
)

DATABASE = "ledger"
LOAD_THREADS = 4
NO_ACK_TARGET_SECONDS = 30.0
LOAD_BEFORE_FAULT_SECONDS = 1.5
BUYS_ON_THE_NEW_PRIMARY = 20
SETTLE_BOUND_SECONDS = 60.0
AUDIT_SECONDS = 120
CALLBACKS_WITHIN_SECONDS = 60.0
WAIT_FOR_NO_STANDBY_SECONDS = 40.0  # the client's: the service answers within its save wait (20 s)


@dataclass
class HaService:
    cluster: Cluster
    server: ApiServer
    database_url: str
    token: str
    receiver: Receiver  # every EUR buy calls it back

    def client(self) -> Api:
        return api_client(self.server.base_url, self.token)


@pytest.fixture(scope="module")
def ha_service(ha_cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[HaService]:
    with psycopg.connect(ha_cluster.url(), autocommit=True, connect_timeout=5) as connection:
        connection.execute(f"CREATE DATABASE {DATABASE}")
    database_url = ha_cluster.url(DATABASE)
    root = tmp_path_factory.mktemp("ha-service")
    with receiving(Receiver(), url_host="localhost") as receiver:
        settings = settings_with_callbacks(root / "settings.toml", receiver.url)
        env = {"BROKER_LEDGER_SETTINGS": str(settings), "BROKER_LEDGER_CALLBACK_POLL_SECONDS": "0.1"}
        server = ApiServer(database_url, root / "var", root / "server.log", workers=2, env=env)
        try:
            server.start()
            yield HaService(ha_cluster, server, database_url, server.token("demo-broker"), receiver)
        finally:
            code = server.stop()
    assert code == 0, f"the server did not exit with 0 on SIGTERM ({code})\n{server.tail()}"


def test_a_killed_primary_loses_no_acknowledged_buy_and_the_service_follows_the_new_one(
    ha_service: HaService, report: Any
) -> None:
    report(**_failover_round(ha_service, faults.kill))


def test_a_hung_primary_loses_no_acknowledged_buy_and_the_service_follows_the_new_one(
    ha_service: HaService, report: Any
) -> None:
    report(**_failover_round(ha_service, faults.hang))


def _failover_round(service: HaService, fault: faults.Fault) -> dict[str, Any]:
    cluster, server = service.cluster, service.server
    cluster.wait_healthy(REJOIN_WITHIN_SECONDS)
    server.wait_until_healthy(30)
    pid, old = server.process.pid, faults.leader(cluster)
    with service.client() as broker:
        customers = customers_for(broker, LOAD_THREADS)
        with BuyLoad(server.base_url, service.token, customers) as load:
            resume = lambda: None  # noqa: E731
            try:
                faults.wait_for(lambda: len(load.acknowledged()) >= 20, 30, "the first buys", _why(server))
                time.sleep(LOAD_BEFORE_FAULT_SECONDS)
                resume = fault(cluster, old)
                fault_at = time.monotonic()
                new = faults.wait_for(
                    lambda: faults.other_leader(cluster, old), FAILOVER_WITHIN_SECONDS, "a new primary"
                )
                promoted_after = time.monotonic() - fault_at
                promoted = time.monotonic()
                faults.wait_for(
                    lambda: _acknowledged_after(load, promoted) >= BUYS_ON_THE_NEW_PRIMARY,
                    NO_ACK_TARGET_SECONDS + 15,
                    "buys acknowledged after the promotion",
                    _why(server),
                )
            finally:
                resume()
        attempts = load.snapshot()
        acknowledged = load.acknowledged()
        in_store_before_retries = transactions_in_store(service.database_url, customers)
        faults.wait_for(
            lambda: faults.rejoined(cluster, old, new),
            REJOIN_WITHIN_SECONDS,
            lambda: f"{old.name} back as a standby\n{cluster.describe()}\n{cluster.log_tail(40)}",
        )
        assert server.alive() and server.process.pid == pid, "the server was restarted"
        settled, buys = check_every_key_buys_once(broker, service.database_url, load, SETTLE_BOUND_SECONDS)
    _check_answers(attempts)
    codes = {expected_code(key) for key in [*acknowledged, *settled.codes]}
    called_back = _called_back(service.receiver, codes)
    faults.wait_for(lambda: _events(old) == _events(new), REJOIN_WITHIN_SECONDS, f"{old.name}'s events")
    health = _health_names(server, new)
    audit = _audit_verify(service.database_url)
    gap = longest_gap([(n, a.sent + a.seconds) for n, a in enumerate(attempts) if a.ok], fault_at)
    assert gap < NO_ACK_TARGET_SECONDS, f"{gap:.1f} s without an acknowledged buy"
    counted = tally(attempts)
    return {
        "old_primary": old.name,
        "new_primary": new.name,
        "promoted_after_s": f"{promoted_after:.1f}",
        "no_ack_s": f"{gap:.1f}",
        "requests": len(attempts),
        "acknowledged": len(acknowledged),
        "answers_503": counted["503"],
        "answers_409": counted["409"],
        "unanswered": dict(failures(attempts)),
        "retried_keys": len(settled.codes),
        "retried_found_made": sum(1 for key in settled.codes if _made(key, in_store_before_retries)),
        "retry_statuses": dict(settled.statuses),
        "acknowledged_lost": 0,  # check_every_key_buys_once: each acknowledged key's buy is in the store
        "duplicates": 0,  # ... and no transaction was created twice
        "buys_in_store": buys,
        "callbacks": called_back,
        "health": health,
        "audit_verify": audit,
    }


def _called_back(receiver: Receiver, codes: set[str]) -> str:
    """Every buy's callback reached the receiver (sent again only as the outbox allows: a delivery whose
    answer was lost, at least once); how many events it got, and how many of them more than once."""

    def delivered() -> dict[str, int]:
        counted: dict[str, int] = {}
        for item in receiver.snapshot():
            if item.ok and item.payload["transaction"]["transactionCode"] in codes:
                counted[item.event_id] = counted.get(item.event_id, 0) + 1
        return counted

    def every_buy() -> set[str]:
        return {item.payload["transaction"]["transactionCode"] for item in receiver.snapshot() if item.ok}

    wait_until(lambda: codes <= every_buy(), CALLBACKS_WITHIN_SECONDS)
    missing = codes - every_buy()
    assert not missing, (
        f"{len(missing)} of {len(codes)} buys were never called back, e.g. {sorted(missing)[:3]}"
    )
    counted = delivered()
    return f"{len(counted)} events, {sum(1 for n in counted.values() if n > 1)} sent again"


def _acknowledged_after(load: BuyLoad, moment: float) -> int:
    return sum(1 for attempt in load.snapshot() if attempt.ok and attempt.sent >= moment)


def _check_answers(attempts: list[Any]) -> None:
    """No 5xx but 503, each a `database_unavailable` problem with Retry-After; 409s are a retried key whose
    first request still holds it, with Retry-After."""
    errors = [a for a in attempts if a.status is not None and a.status >= 500 and a.status != 503]
    assert not errors, f"{len(errors)} answers were 5xx other than 503, e.g. {errors[:3]}"
    for attempt in (a for a in attempts if a.status == 503):
        assert attempt.problem_json and attempt.code == "database_unavailable", attempt
        assert attempt.retry_after and int(attempt.retry_after) > 0, attempt
    for attempt in (a for a in attempts if a.status == 409):
        assert attempt.code == "idempotency_request_in_progress" and attempt.retry_after, attempt
    other = [a for a in attempts if a.status is not None and not a.ok and a.status not in (409, 503)]
    assert not other, f"unexpected answers: {tally(other)}, e.g. {other[:3]}"


def _made(key: str, in_store: Any) -> bool:
    return Transaction.create_id(PARTNER, expected_code(key)) in in_store


def _events(node: Node) -> tuple[int, int] | None:
    with faults.connect(node, DATABASE) as connection:
        row = connection.execute("SELECT count(*), max(notification_id) FROM ledger.ledger_events").fetchone()
    return None if row is None else (row[0], row[1])


def _health_names(server: ApiServer, new: Node) -> str:
    """GET /health answers 200 naming the new primary as the server the worker writes to."""
    body: dict[str, Any] = {}

    def names_it() -> bool:
        nonlocal body
        response = httpx.get(f"{server.base_url}/health", timeout=5)
        body = response.json()
        return response.status_code == 200 and body["database"] == {
            "server": f"127.0.0.1:{new.pg_port}",
            "primary": True,
        }

    faults.wait_for(names_it, 30, lambda: f"/health to name {new.name}: {body}")
    return body["database"]["server"]


def _audit_verify(database_url: str) -> str:
    done = subprocess.run(
        [*CLI_COMMAND, "audit", "verify"],
        cwd=ROOT,
        env={**_environment(), "DATABASE_URL": database_url},
        capture_output=True,
        text=True,
        timeout=AUDIT_SECONDS,
        check=False,
    )
    assert done.returncode == 0, (
        f"audit verify failed ({done.returncode}):\n{done.stdout[-3000:]}{done.stderr[-2000:]}"
    )
    return "passed"


def _environment() -> dict[str, str]:
    return {key: value for key, value in os.environ.items() if not key.startswith("BROKER_LEDGER_")}


def _why(server: ApiServer) -> Any:
    return lambda: f"\nthe server's log:\n{server.tail(40)}"


def test_with_both_standbys_gone_a_buy_is_never_acknowledged_and_its_retry_buys_once_they_are_back(
    ha_service: HaService, report: Any
) -> None:
    """Both standbys' machines hang: a commit cannot be acknowledged (synchronous_mode_strict), so the buy
    waits and is answered 503 `database_unavailable` once the committer's deadline passes, never 201, and
    nothing of it is visible meanwhile (its commit waits for a standby, it is not cancelled); once the
    standbys are back, the retry of its key answers the one buy that committed."""
    cluster, server = ha_service.cluster, ha_service.server
    cluster.wait_healthy(REJOIN_WITHIN_SECONDS)
    primary = faults.leader(cluster)
    with ha_service.client() as broker:
        broker.timeout = httpx.Timeout(WAIT_FOR_NO_STANDBY_SECONDS)
        customer = customers_for(broker, 1)[0]
        key, body = f"no-standby-{uuid.uuid4().hex}", buy_body(customer, 10)
        resumes = [faults.hang(cluster, node) for node in cluster.nodes if node.name != primary.name]
        try:
            attempt = post_buy(broker, key, body)
            seen = transactions_in_store(ha_service.database_url, [customer])
            health = httpx.get(f"{server.base_url}/health", timeout=10)
        finally:
            for resume in resumes:
                resume()
        settled = settle(broker, {key: body}, SETTLE_BOUND_SECONDS)
    assert attempt.status == 503 and attempt.code == "database_unavailable", attempt
    assert attempt.retry_after, attempt
    assert not seen, "a buy whose commit no standby has is visible on the primary"
    assert not settled.left, f"the retry never got a 2xx: {settled.statuses}"
    assert list(transactions_in_store(ha_service.database_url, [customer]).values()) == [1]
    report(
        answered=f"{attempt.status} {attempt.code} in {attempt.seconds:.1f} s",
        health_meanwhile=f"{health.status_code} {health.json().get('code', '')}",
        retry_statuses=dict(settled.statuses),
    )


def test_health_tells_a_standby_from_the_primary(ha_service: HaService) -> None:
    cluster = ha_service.cluster
    primary = faults.leader(cluster)
    standby = next(node for node in cluster.nodes if node.name != primary.name)
    with faults.connect(primary) as on_primary, faults.connect(standby) as on_standby:
        assert database_server(on_primary).primary
        found = database_server(on_standby)
    assert found == DatabaseServer(server=f"127.0.0.1:{standby.pg_port}", primary=False)
