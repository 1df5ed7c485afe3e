"""The failover of the Patroni topology (docs/high-availability.md) under a loop of commits, with Patroni's
production defaults or the tests' timeouts: what happens, how long, and whether anything acknowledged is lost.

Run (as root, or as a user that can run PostgreSQL; needs Debian's patroni, etcd-server, postgresql-15:
`scripts/ha-cluster install`):

    .venv/bin/python bench/ha_failover.py --timeouts defaults [--faults kill,stop]

`--timeouts defaults` is Patroni's own (ttl 30, loop_wait 10, retry_timeout 10, primary_start_timeout 300);
`--timeouts tests` is tests/ha's (ttl 10, loop_wait 1, retry_timeout 4, primary_start_timeout 0). One topology
(tests/ha/cluster.py: etcd and three Patroni nodes on loopback, a temp folder) is started for the run; per
fault, the tests' writer (tests/ha/writer.py: one row per transaction through the multi-host URL, reconnecting
on any error) commits for a while, then the fault hits the primary:

- `kill`: SIGKILL of the primary's postmaster (PostgreSQL crashes; its Patroni lives on);
- `stop`: SIGSTOP of the primary's Patroni and PostgreSQL (a frozen machine), SIGCONT once a primary takes
  writes again.

The script waits for a primary that takes writes again: another node promoted, or (with primary_start_timeout
> 0, a killed PostgreSQL) the same node's PostgreSQL restarted in place by its Patroni. It prints, per fault:
`outcome` (failed over to which node, or restarted in place), `writable_after` (from the fault to a primary
that answers as one), `no_ack` (the longest time without an acknowledged commit, from the last one before the
fault), `acknowledged`, `unanswered` (cut or failed mid-commit: unknown) and how many of those were committed,
`acknowledged_lost` and `duplicates` (must both be 0), and `back_after` (from the fault until the old primary
is a streaming standby of the new one again, or the topology is whole again). Everything is stopped and the
folder removed at the end, also on an error or Ctrl-C; the exit status is 1 if anything acknowledged was lost,
a row was written twice, or a process was left running.
"""

from __future__ import annotations

import argparse
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a script: the project's packages and tests/ are importable
    sys.path.insert(0, str(ROOT))

from tests.ha import faults  # noqa: E402
from tests.ha.cluster import TEST_TIMEOUTS, Cluster, Node, missing_packages  # noqa: E402
from tests.ha.writer import Writer, longest_gap  # noqa: E402

# Patroni's defaults (its documentation, "Dynamic Configuration Settings"), written out so that the
# cluster's configuration does not fall back on the tests' values
PATRONI_DEFAULTS = {"ttl": 30, "loop_wait": 10, "retry_timeout": 10, "primary_start_timeout": 300}
TIMEOUTS = {"defaults": PATRONI_DEFAULTS, "tests": TEST_TIMEOUTS}
START_WITHIN = 240.0  # seconds: with loop_wait 10 the standbys take a few loops to stream and be named sync
LOAD_BEFORE = 3.0  # seconds of commits before the fault
LOAD_AFTER = 3.0  # seconds of commits once a primary takes writes again
ACKS_AFTER = 20  # commits acknowledged by the primary after the fault before it counts as taking writes
WRITABLE_WITHIN = 180.0  # seconds from the fault; with ttl 30 a hung primary takes 30-45 s
BACK_WITHIN = 180.0  # seconds from the fault for the old primary to stream again


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--timeouts", choices=sorted(TIMEOUTS), default="defaults")
    parser.add_argument("--faults", default="kill,stop", help="comma-separated, in order: kill, stop")
    parser.add_argument(
        "--log", action="store_true", help="print Patroni's lines of the old primary's log since each fault"
    )
    parser.add_argument(
        "--folder", help="the topology's folder (a new temp dir by default; removed at the end)"
    )
    args = parser.parse_args()
    faults = [fault.strip() for fault in args.faults.split(",") if fault.strip()]
    if not faults or set(faults) - set(FAULTS):
        parser.error(f"--faults takes {', '.join(FAULTS)}")
    if missing_packages():
        print(
            f"ha_failover: missing {', '.join(missing_packages())}: scripts/ha-cluster install",
            file=sys.stderr,
        )
        return 2
    signal.signal(signal.SIGTERM, _exit_on_signal)  # stop the topology on a plain kill, too

    cluster = Cluster.create(args.folder, timeouts=TIMEOUTS[args.timeouts])
    settings = ", ".join(f"{key} {value}" for key, value in cluster.timeouts.items())
    print(f"ha_failover: timeouts {args.timeouts} ({settings}); folder {cluster.folder}", flush=True)
    failed = False
    try:
        started = time.monotonic()
        cluster.start(timeout=START_WITHIN)
        print(f"ha_failover: topology healthy after {time.monotonic() - started:.1f} s", flush=True)
        _create_probe(cluster)
        for number, fault in enumerate(faults, start=1):
            figures, log = run_fault(cluster, number, fault)
            print(f"[{fault}] " + ", ".join(f"{key}={value}" for key, value in figures.items()), flush=True)
            if args.log:
                print(log, flush=True)
            failed |= figures["acknowledged_lost"] > 0 or figures["duplicates"] > 0
    finally:
        cluster.stop()
        left = cluster.processes()
        cluster.remove()
        print(f"ha_failover: stopped; {len(left)} process(es) left {left}; folder removed", flush=True)
    return 1 if failed or left else 0


def run_fault(cluster: Cluster, round_: int, fault: str) -> tuple[dict[str, Any], str]:
    """One round: load, the fault on the primary, a primary that takes writes again, the old one's return;
    the figures, and Patroni's lines of the old primary's log since the fault."""
    cluster.wait_healthy(BACK_WITHIN)
    old = _wait_for(cluster.leader, 30, "a primary")
    old_postmaster = old.postmaster_pid()
    writer = Writer(cluster.url(), round_)
    writer.start()
    resume: Callable[[], None] = lambda: None  # noqa: E731
    try:
        _wait_for(lambda: len(writer.acked) >= 50, 30, "the writer's first commits", writer)
        time.sleep(LOAD_BEFORE)
        log_from = old.log_file.stat().st_size
        resume = FAULTS[fault](cluster, old)
        fault_at = time.monotonic()
        new = _wait_for(
            lambda: _writable_primary(cluster, old, old_postmaster),
            WRITABLE_WITHIN,
            "a primary again",
            writer,
        )
        writable_after = time.monotonic() - fault_at
        _wait_for(lambda: _acked_since(writer, new, fault_at) >= ACKS_AFTER, 60, "commits on it", writer)
        time.sleep(LOAD_AFTER)
    finally:
        resume()
        writer.stop()
    back = _wait_for(lambda: _back(cluster, old, new), BACK_WITHIN, f"{old.name} back as a standby", writer)
    back_after = back - fault_at
    rows = _rows(new, round_)
    acked = [request for request, _ in writer.acked]
    lost = [request for request in acked if rows.get(request, 0) == 0]
    duplicates = [request for request, count in rows.items() if count > 1]
    outcome = f"failed over to {new.name}" if new.name != old.name else f"restarted in place on {old.name}"
    figures = {
        "outcome": outcome,
        "writable_after_s": f"{writable_after:.1f}",
        "no_ack_s": f"{longest_gap(writer.acked, fault_at):.1f}",
        "back_after_s": f"{back_after:.1f}",
        "acknowledged": len(acked),
        "unanswered": len(writer.unanswered),
        "unanswered_committed": sum(1 for request in writer.unanswered if request in rows),
        "acknowledged_lost": len(lost),
        "duplicates": len(duplicates),
        "timeline": _timeline(cluster, new),
    }
    return figures, _patroni_lines(old, log_from, fault_at)


FAULTS = {"kill": faults.kill, "stop": faults.hang}


def _writable_primary(cluster: Cluster, old: Node, old_postmaster: int | None) -> Node | None:
    """The running leader, when its PostgreSQL is out of recovery and is not the one that had the fault:
    another node, or the old one with a new postmaster (restarted in place)."""
    leader = cluster.leader()
    if leader is None:
        return None
    if leader.name == old.name and leader.postmaster_pid() in (None, old_postmaster):
        return None
    try:
        with psycopg.connect(leader.url(), autocommit=True, connect_timeout=2) as connection:
            row = connection.execute("SELECT pg_is_in_recovery()").fetchone()
    except psycopg.Error:
        return None
    return leader if row is not None and not row[0] else None


def _acked_since(writer: Writer, node: Node, since: float) -> int:
    pairs = list(zip(writer.acked, writer.ports, strict=False))
    return sum(1 for (_, at), port in pairs if port == node.pg_port and at > since)


def _back(cluster: Cluster, old: Node, new: Node) -> float | None:
    """The time the topology is whole again with `new` leading and `old` (when it is another node) streaming
    from it on its timeline."""
    members = {member["name"]: member for member in cluster.members()}
    leader, former = members.get(new.name, {}), members.get(old.name, {})
    whole = cluster.healthy() and leader.get("role") == "leader"
    if whole and old.name != new.name:
        whole = former.get("role") in ("replica", "sync_standby") and former.get("timeline") == leader.get(
            "timeline"
        )
    return time.monotonic() if whole else None


def _patroni_lines(node: Node, offset: int, fault_at: float, most: int = 40) -> str:
    """Patroni's own lines (not PostgreSQL's) of `node`'s log from `offset` on, each with the seconds since
    the fault (from the line's wall-clock time), at most `most` of them."""
    with open(node.log_file, "rb") as log:
        log.seek(offset)
        text = log.read().decode(errors="replace")
    fault_wall = time.time() - (time.monotonic() - fault_at)
    lines = []
    for line in text.splitlines():
        if " INFO: " not in line and " WARNING: " not in line and " ERROR: " not in line:
            continue
        try:  # Patroni's format, in local time: 2026-12-02 10:33:38,123 INFO: ...
            stamp = time.mktime(time.strptime(line[:19], "%Y-%m-%d %H:%M:%S")) + int(line[20:23]) / 1000
            lines.append(f"  +{stamp - fault_wall:5.1f} s {node.name}: {line[24:][:160]}")
        except ValueError:
            continue
    return "\n".join(lines[:most])


def _timeline(cluster: Cluster, node: Node) -> Any:
    return next((m.get("timeline") for m in cluster.members() if m.get("name") == node.name), "?")


def _create_probe(cluster: Cluster) -> None:
    with psycopg.connect(cluster.url(), autocommit=True, connect_timeout=5) as connection:
        connection.execute(
            "CREATE TABLE IF NOT EXISTS ha_probe (id bigserial PRIMARY KEY, request bigint NOT NULL,"
            " round int NOT NULL, written_at timestamptz NOT NULL DEFAULT clock_timestamp())"
        )


def _rows(node: Node, round_: int) -> dict[int, int]:
    with psycopg.connect(node.url(), autocommit=True, connect_timeout=5) as connection:
        found = connection.execute(
            "SELECT request, count(*) FROM ha_probe WHERE round = %s GROUP BY request", (round_,)
        ).fetchall()
    return dict(found)


def _wait_for(condition: Callable[[], Any], timeout: float, what: str, writer: Writer | None = None) -> Any:
    errors = lambda: "; the writer's last errors:\n" + "\n".join(writer.errors[-5:]) if writer else ""  # noqa: E731
    return faults.wait_for(condition, timeout, what, errors)


def _exit_on_signal(signum: int, _frame: Any) -> None:
    """SIGTERM ends the run as Ctrl-C does: the `finally` of `main` stops the topology."""
    raise SystemExit(128 + signum)


if __name__ == "__main__":
    sys.exit(main())
