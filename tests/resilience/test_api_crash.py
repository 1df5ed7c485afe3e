"""The API process killed (SIGKILL to its whole process group: uvicorn's supervisor and both workers) in the
middle of a load of buys, and started again on the same database, round after round.

Nothing the service acknowledged may be lost: every buy that got a 2xx is in the event store. Retrying every
other key with the same Idempotency-Key ends in a 2xx and exactly one transaction per key (a claim the
killed process held lapses by itself), and the read models catch up so that every buy reads back by code.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from tests.resilience.conftest import Service
from tests.resilience.load import (
    BuyLoad,
    check_every_key_buys_once,
    customers_for,
    failures,
    tally,
)

LOAD_THREADS = 4
UP_SECONDS = 0.5  # of load before each kill, and after the last restart: some 40 buys
RECOVERY_BOUND_SECONDS = 20.0
SETTLE_BOUND_SECONDS = 30.0


@dataclass(frozen=True)
class Crash:
    restart: float  # seconds the new server took until /health answered 200
    recovery: float | None  # seconds from the restart to the answer of the first 2xx buy sent after it


def kill_the_api(service: Service, load: BuyLoad, rounds: int) -> list[Crash]:
    """`rounds` times: let the load run, SIGKILL the process group, start it again, wait for a 2xx."""
    crashes = []
    for _ in range(rounds):
        time.sleep(UP_SECONDS)
        service.server.kill()
        restart = service.server.start()
        restarted = time.monotonic()
        recovery = load.wait_for_success_after(restarted, RECOVERY_BOUND_SECONDS)
        crashes.append(Crash(restart, recovery))
        assert recovery is not None, f"no buy succeeded within {RECOVERY_BOUND_SECONDS} s of the restart"
    time.sleep(UP_SECONDS)
    return crashes


def test_acknowledged_buys_survive_sigkill_of_the_api_and_retried_keys_buy_exactly_once(
    service: Service, crash_rounds: int, report
) -> None:
    with service.client() as broker:
        customers = customers_for(broker, LOAD_THREADS)
        with BuyLoad(service.server.base_url, service.tokens["demo-broker"], customers) as load:
            crashes = kill_the_api(service, load, crash_rounds)
        attempts = load.snapshot()
        errors = [a for a in attempts if a.status is not None and a.status >= 500]
        assert not errors, f"{len(errors)} answers were 5xx, e.g. {errors[:3]}"
        settled, buys = check_every_key_buys_once(broker, service.database_url, load, SETTLE_BOUND_SECONDS)
    counted = tally(attempts)
    report(
        rounds=crash_rounds,
        requests=len(attempts),
        ok_2xx=counted["2xx"],
        no_answer=dict(failures(attempts)),
        other_statuses={k: v for k, v in counted.items() if k not in ("2xx", "no answer")},
        restart_s=[round(c.restart, 2) for c in crashes],
        recovery_after_restart_s=[round(c.recovery, 2) for c in crashes],
        retried_keys=len(settled.codes),
        retry_statuses=dict(settled.statuses),
        settle_s=round(settled.seconds, 2),
        read_models_caught_up_s=round(settled.caught_up, 2),
        buys_in_store=buys,
    )
