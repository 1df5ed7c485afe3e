"""The benchmark's profile split (bench/profile_split.py) reads py-spy's collapsed stacks: each sample once
by its leaf (a library, the standard library, ours) and once by the deepest of our modules on its stack."""

from __future__ import annotations

import sysconfig

from bench.profile_split import mechanism_of, report, split

STD = sysconfig.get_paths()["stdlib"]
SITE = "/work/main/.venv/lib/python3.11/site-packages"
OURS = "/work/main"


def frame(function: str, path: str) -> str:
    return f"{function} ({path}:10)"


def test_each_sample_counts_by_its_leaf_and_by_the_deepest_of_our_modules() -> None:
    loop = frame("run", f"{STD}/asyncio/events.py")
    claim = frame("claim", f"{OURS}/interface/idempotency/middleware.py")
    encode = frame("encode", f"{OURS}/application/store/msgspec_mapper.py")
    lines = [
        f"{loop};{claim};{frame('execute', f'{SITE}/psycopg/cursor.py')} 6",
        f"{loop};{claim};{encode};{frame('dumps', f'{STD}/json/encoder.py')} 3",
        f"{frame('wait', f'{STD}/threading.py')} 1",
        "not a stack line",
    ]

    found = split(lines)

    assert found.samples == 10
    assert found.libraries == {"psycopg": 6}
    assert found.standard_library == {"json": 3, "threading": 1}
    assert found.hand_offs == 1
    assert found.mechanisms == {
        "Idempotency-Key": 6,
        "event mapper": 3,
        "outside our modules (server, event loop)": 1,
    }
    printed = "\n".join(report(found))
    assert "libraries 60.0 %" in printed and "thread hand-offs 10.0 %" in printed


def test_a_module_is_named_by_the_longest_prefix_of_its_mechanism() -> None:
    assert mechanism_of("application/store/group_commit/batches") == "group commit"
    assert mechanism_of("application/store/request_writes") == "request's writes"
    assert mechanism_of("application/buys") == "use cases"
    assert mechanism_of("domain/limits") == "limits"
