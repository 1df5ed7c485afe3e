"""Use cases run on the event loop (`application.store.on_loop`): their waits awaited on the loop's own
thread, errors raised where they waited, a request cancelled by its scope waits for its use case's end; their
read-aheads read together (`application.store.loop_reads`) give each use case what its own read-ahead would,
and buys made together on the loop keep the limits' totals."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import anyio
import pytest
from psycopg_pool import AsyncConnectionPool

from application.commands import BuyRequest
from application.ledger import Ledger
from application.store.on_loop import on_loop, run_on_loop, wait_for
from application.use_cases import UseCases
from domain.limits import PERIODS, LimitWindow, period_key


def test_a_use_case_on_the_loop_waits_on_the_loops_own_thread() -> None:
    def use_case(value: int) -> tuple[int, bool, int]:
        awaited = wait_for(asyncio.sleep(0, result=value + 1))
        return awaited, on_loop(), threading.get_ident()

    async def request() -> tuple[tuple[int, bool, int], int]:
        return await run_on_loop(use_case, 41), threading.get_ident()

    (awaited, was_on_loop, thread), loop_thread = asyncio.run(request())
    assert (awaited, was_on_loop, thread) == (42, True, loop_thread)
    assert not on_loop()


def test_an_error_of_what_it_awaited_is_raised_where_the_use_case_waited() -> None:
    async def refused() -> None:
        raise LookupError("no such row")

    def use_case() -> str:
        try:
            wait_for(refused())
        except LookupError as error:
            return f"caught {error}"
        return "not raised"

    assert asyncio.run(run_on_loop(use_case)) == "caught no such row"


def test_waiting_outside_a_use_case_on_the_loop_is_refused() -> None:
    never_awaited = asyncio.sleep(0)
    with pytest.raises(RuntimeError, match="only for a use case run by run_on_loop"):
        wait_for(never_awaited)
    never_awaited.close()


def test_a_request_cancelled_by_its_scope_waits_for_its_use_case_to_end() -> None:
    steps: list[str] = []

    def use_case() -> None:
        wait_for(asyncio.sleep(0.05))
        steps.append("saved")

    async def request() -> bool:
        with anyio.move_on_after(0.01) as scope:
            await run_on_loop(use_case)
        return scope.cancelled_caught

    assert asyncio.run(request()) is False  # as anyio's threads: the shielded use case ended first
    assert steps == ["saved"]


def _window_ids(ledger: Ledger, customer: str) -> list[Any]:
    now = ledger.clock.now()
    return [LimitWindow.create_id("demo", customer, "buy", period_key(period, now)) for period in PERIODS]


def test_read_aheads_read_together_give_each_use_case_what_its_own_read_gives(
    ledger: Ledger,
    use_cases: UseCases,
    active_customer_with_btc_account: Callable[..., Any],
) -> None:
    made = [active_customer_with_btc_account("demo", f"loop-{n}") for n in range(3)]
    for customer, account in made:
        use_cases.buys.create("demo", buy_request(customer.code, account.customer_address), stage=False)
    customers = [customer for customer, _ in made]
    table = ledger.snapshots.recorder.events_table_name
    recorder = ledger.recorder
    # one customer's windows are read as histories by one use case and as latest events by another
    reads = [
        ([customers[0].id, *_window_ids(ledger, customers[0].code)], _window_ids(ledger, customers[1].code)),
        (
            [customers[1].id],
            [*_window_ids(ledger, customers[0].code), *_window_ids(ledger, customers[2].code)],
        ),
        ([customers[2].id, customers[0].id], []),
    ]
    alone = [recorder.select_histories_and_latest_of(ids, latest, table) for ids, latest in reads]

    async def together() -> list[Any]:
        async with loop_pool(ledger) as pool:
            recorder.read_on_loop(pool)
            try:
                return await asyncio.gather(
                    *(run_on_loop(recorder.select_histories_and_latest_of, *read, table) for read in reads)
                )
            finally:
                recorder.loop_pool = None

    assert [_rows(events) for events in asyncio.run(together())] == [_rows(events) for events in alone]


def test_buys_made_together_on_the_loop_each_count_once_in_the_limits(
    ledger: Ledger,
    use_cases: UseCases,
    active_customer_with_btc_account: Callable[..., Any],
) -> None:
    customer, account = active_customer_with_btc_account("demo", "loop-buyer")
    request = buy_request(customer.code, account.customer_address)

    async def buying() -> list[Any]:
        async with loop_pool(ledger) as pool:
            ledger.recorder.read_on_loop(pool)
            try:
                buys = [
                    use_cases.buys.store.run(use_cases.buys.create, "demo", request, False) for _ in range(8)
                ]
                return await asyncio.gather(*buys)
            finally:
                ledger.recorder.loop_pool = None

    made = asyncio.run(buying())
    assert len({transaction.code for transaction in made}) == 8
    usage = {u.period: u.used for u in use_cases.limits.usage("demo", customer.code) if u.direction == "buy"}
    assert set(usage.values()) == {Decimal("80.00")}


def loop_pool(ledger: Ledger) -> AsyncConnectionPool:
    """An async pool of one connection to the ledger's database."""
    with ledger.recorder.datastore.get_connection() as conn:
        conninfo = conn.info.dsn
    return AsyncConnectionPool(conninfo, min_size=0, max_size=1, open=False)


def buy_request(customer: str, address: str) -> BuyRequest:
    return BuyRequest(customer, "EUR", "BTC", Decimal("10"), address, "BANK_EUR_BUY")


def _rows(events: list[Any]) -> list[tuple[Any, ...]]:
    return sorted((e.originator_id, e.originator_version, e.topic, e.state) for e in events)
