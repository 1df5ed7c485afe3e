"""The app runs its use cases on USE_CASE_THREADS threads of its own, all of them at once if need be, so that
as many saves as requests can wait together for one group commit."""

from __future__ import annotations

import asyncio
import threading

from interface.app import USE_CASE_THREADS


def test_use_cases_run_on_the_apps_own_threads(client):
    async def thread_name() -> str:
        return await asyncio.get_running_loop().run_in_executor(None, lambda: threading.current_thread().name)

    assert client.blocking_portal.call(thread_name).startswith("use-case")


def test_as_many_use_cases_as_the_app_has_threads_run_at_once(client):
    together = threading.Barrier(USE_CASE_THREADS, timeout=10)

    async def all_at_once() -> set[int]:
        loop = asyncio.get_running_loop()
        waits = [loop.run_in_executor(None, together.wait) for _ in range(USE_CASE_THREADS)]
        return set(await asyncio.gather(*waits))

    assert client.blocking_portal.call(all_at_once) == set(range(USE_CASE_THREADS))
