"""Use cases run on the event loop, without a thread: `run_on_loop` and the store's waits (`wait_for`,
`pause`).

A use case is plain synchronous code (the domain's rules between one read-ahead and one save), and until now a
request ran it in a worker thread: the event loop handed it to the thread pool, the thread handed its save to
the group committer and waited, and the answer came back through a future and anyio's hand-offs. Those
hand-offs cost a buy more than its read-ahead. `run_on_loop` runs the same code in a greenlet on the event
loop's own thread instead: where the store has to wait for the database (its read-ahead, its save's commit, a
backoff), it calls `wait_for(awaitable)`, which switches back to the request's task; the task awaits it (an
async connection's query, the committer's future) while the loop serves other requests, and switches the
result (or the error) back into the use case, which goes on as if it had waited in a thread. This is how
SQLAlchemy's asyncio extension runs its synchronous core (`greenlet_spawn` and `await_only`).

Outside such a greenlet (a use case in a worker thread, the command line, the sweeper, tests) `on_loop()` is
False and the store does its I/O as before, blocking its thread: the same use case serves both.

It is cancelled as anyio's worker threads are: a cancel scope's cancellation (anyio's) waits until the use
case has ended; asyncio's own `Task.cancel` stops the request at once, and the use case at the wait it is in
(where a thread would have run on unheard), while a save already handed to the committer is written all the
same, as its thread's would have been.
"""

from __future__ import annotations

import asyncio
import contextvars
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import anyio
from greenlet import getcurrent, greenlet

T = TypeVar("T")


class _UseCase(greenlet):  # type: ignore[misc]  # greenlet's class has no type information
    """The greenlet a use case runs in; its parent is the request's task, which awaits what it waits for."""


def on_loop() -> bool:
    """True inside a use case run by `run_on_loop`: its waits must go through `wait_for`."""
    return isinstance(getcurrent(), _UseCase)


def wait_for(awaitable: Awaitable[T]) -> T:
    """The result of `awaitable`, awaited by the request's task while the use case is switched out (its error
    raised here). Only inside `run_on_loop`."""
    current = getcurrent()
    if not isinstance(current, _UseCase):
        raise RuntimeError("wait_for is only for a use case run by run_on_loop")
    return current.parent.switch(awaitable)  # type: ignore[no-any-return]


def pause(seconds: float) -> None:
    """Waits `seconds` (a backoff): on the loop without blocking it, elsewhere by sleeping."""
    if on_loop():
        wait_for(asyncio.sleep(seconds))
    else:
        time.sleep(seconds)


async def run_on_loop(function: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """`function(*args, **kwargs)` run in a greenlet on this event loop, its waits awaited here (see the
    module's docstring); in a copy of the caller's context, as a worker thread would run it."""
    use_case = _UseCase(function, getcurrent())
    use_case.gr_context = contextvars.copy_context()
    with anyio.CancelScope(shield=True):  # a scope's cancellation waits for its end, as for anyio's threads
        step = use_case.switch(*args, **kwargs)
        while not use_case.dead:
            try:
                result = await step
            except BaseException as error:  # into the use case, where its wait raises it
                step = use_case.throw(error)
            else:
                step = use_case.switch(result)
    return step  # type: ignore[no-any-return]
