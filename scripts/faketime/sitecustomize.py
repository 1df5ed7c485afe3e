"""Loaded by every Python process that scripts/test-calendar starts (it puts this folder on PYTHONPATH), and
only by those: Debian's libfaketime 0.9.10 breaks Python's `time.sleep` when the monotonic clock is left
real (FAKETIME_DONT_FAKE_MONOTONIC=1): it shifts the absolute monotonic deadline of `clock_nanosleep` by the
faked offset, and the call fails with EINVAL. The monotonic clock must stay real, as faking it hangs every
lock and event wait with a timeout. So `time.sleep` waits on `select`, whose timeout is relative and which
libfaketime leaves alone; the wall clock (`time.time`, `datetime.now`) is still the faked one."""

import select
import time

_real_sleep = time.sleep


def _sleep(seconds: float) -> None:
    if seconds < 0:
        _real_sleep(seconds)  # the same ValueError as ever
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        select.select([], [], [], left)


time.sleep = _sleep
