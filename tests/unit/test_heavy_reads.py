"""A partner's heavy reads, at most `per_partner` at once (`interface/http/heavy_reads.py`), in memory."""

from __future__ import annotations

import asyncio
import threading

import pytest

from application.settings import DEFAULT_SETTINGS, SettingsError
from interface.http.heavy_reads import HeavyReads
from interface.http.problems import ApiProblem
from interface.http.settings import decode_service_settings


def test_a_read_beyond_the_partners_slots_is_refused_with_429_and_retry_after_once_the_wait_is_over():
    reads = HeavyReads(per_partner=2, wait_seconds=0.05)
    with reads.slot("demo"), reads.slot("demo"), pytest.raises(ApiProblem) as refused:
        reads.slot("demo").__enter__()
    assert refused.value.status_code == 429 and refused.value.code == "heavy_reads_busy"
    assert refused.value.headers["Retry-After"] == "1"
    assert reads.running("demo") == 0


def test_another_partners_slots_are_its_own():
    reads = HeavyReads(per_partner=1, wait_seconds=0)
    with reads.slot("demo"), reads.slot("other"):
        assert reads.running("demo") == reads.running("other") == 1
        assert not reads.try_enter("demo")


def test_a_read_waiting_in_a_thread_gets_the_slot_freed_within_the_wait():
    reads = HeavyReads(per_partner=1, wait_seconds=2)
    assert reads.try_enter("demo")
    threading.Timer(0.05, reads.leave, ("demo",)).start()
    with reads.slot("demo"):
        assert reads.running("demo") == 1


def test_a_read_waiting_on_the_event_loop_gets_the_slot_freed_within_the_wait_and_else_is_refused():
    reads = HeavyReads(per_partner=1, wait_seconds=0.3)
    assert reads.try_enter("demo")

    async def wait_then_free() -> None:
        asyncio.get_running_loop().call_later(0.05, reads.leave, "demo")
        await reads.enter("demo")  # the slot freed meanwhile
        with pytest.raises(ApiProblem):
            await reads.enter("demo")  # held by this very read now: refused after the wait

    asyncio.run(wait_then_free())
    assert reads.running("demo") == 1


def test_the_settings_refuse_a_partner_share_below_one_and_a_negative_wait():
    text = DEFAULT_SETTINGS.read_text().replace(
        "[heavy_reads]\nper_partner = 1\nwait_seconds = 1\n",
        "[heavy_reads]\nper_partner = 0\nwait_seconds = -1\n",
    )
    with pytest.raises(SettingsError) as refused:
        decode_service_settings(text)
    assert "heavy_reads.per_partner must be at least 1" in str(refused.value)
    assert "heavy_reads.wait_seconds must be a number of seconds, 0 or more" in str(refused.value)
