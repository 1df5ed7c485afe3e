"""Token flood benchmark: can bad `POST /connect/token` requests starve the real server?

Run:

    .venv/bin/python bench/token_flood.py [--workers 2] [--threads 40] [--requests 120]
                                          [--database-url postgresql://postgres@127.0.0.1:5432/postgres]
                                          [--addresses 40] [--legacy-hashes]

What it does, in order (about 20 s; bounded: every request times out after 30 s):
1. In this process, the CPU time (`time.process_time`) of one check of a wrong secret: against an HMAC
   record (what the service stores for the secrets it generates) and against an argon2 hash with the
   library's defaults (what it stored before, and what a `secret_hash` in the settings still is).
2. Creates a fresh database `bench_load_<random>` on the PostgreSQL of --database-url (dropped at the end)
   and starts `broker-ledger serve --workers N --no-projections` on a loopback port, in its own process
   group, with the demo settings, a private var directory and pools of 4 connections (nothing here needs
   the projections or more connections). With --legacy-hashes the var directory is prepared first with the
   demo clients' records as argon2 hashes, as a service started before HMAC left them, and client-secrets.txt
   holding demo-broker's secret only (as if the others had been handed out and deleted): demo-broker's
   record is rewritten as HMAC on start, demo-auditor's stays argon2, so the flood's wrong secrets for it
   take the bounded argon2 path.
3. Takes a demo-broker token the OAuth2 way and measures authenticated `GET /prices/EUR` (one client,
   one request every 10 ms, below the client's rate limit) for --baseline seconds: the quiet latency.
4. A control flood, then two token floods, each of --requests requests from --threads threads, each on a
   new connection. The control asks the trivial `GET /health/live` (no token, no database) from 127.0.0.1:
   what that many connections cost on this machine now, whatever the endpoint. The token floods are bad
   token requests (two in three a random client id and secret, one in three demo-auditor, a known client,
   with a wrong secret): the first from 127.0.0.1 alone, so the per-address count of failed attempts
   answers most of it with 429; the second from --addresses loopback addresses (127.0.0.2 and up), so
   nearly every request is answered 401 after a full check. During each, the same GET runs every 10 ms
   and every worker's VmRSS is sampled every 50 ms; the GETs go on for --after seconds after the flood.
5. Prints per flood the answers by status, the GET latency (p50, p99, max) and, for a token flood, its p99
   as a multiple of the control's, the workers' CPU seconds, their RSS before, at the peak and after, and
   whether the targets hold: p99 of the GETs under the flood below 250 ms, no worker above 200 MB, no 5xx.

The load generator shares the machine with the server and PostgreSQL, so the figures are this machine's;
on a shared, noisy machine the ratio to the control says more than the milliseconds.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import secrets
import signal
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from argon2 import PasswordHasher

from application.credentials import CREDENTIALS_FILE, SECRETS_FILE, load_or_create_credentials
from application.secret_hashes import SecretHasher
from application.settings import DEFAULT_SETTINGS
from bench.cpu import CpuMeter
from bench.lag import percentile
from bench.load_support import (
    VENV_BIN,
    Process,
    broker_token,
    drop_database,
    free_port,
    fresh_database,
    rss_mb,
    running,
    server_env,
)
from interface.http.settings import load_service_settings

DEFAULT_DATABASE_URL = "postgresql://postgres@127.0.0.1:5432/postgres"
BROKER = "demo-broker"  # the client of the authenticated GETs
KNOWN_CLIENT = "demo-auditor"  # the flood's known client id; never logs in, so a legacy hash stays argon2
P99_TARGET_MS = 250
RSS_TARGET_MB = 200
RSS_SAMPLE_SECONDS = 0.05
WORKERS_TIMEOUT_SECONDS = 30
GET_INTERVAL_SECONDS = 0.01  # 100 GETs/s at most: under the demo settings' 200/s per client
STARTED = time.monotonic()
CONTROL = "control (GET /health/live)"


def note(message: str) -> None:
    print(f"[{time.monotonic() - STARTED:5.1f} s] {message}", file=sys.stderr, flush=True)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--threads", type=int, default=40)
    parser.add_argument("--requests", type=int, default=120)
    parser.add_argument("--baseline", type=float, default=3.0, help="seconds of quiet GETs before")
    parser.add_argument("--after", type=float, default=1.0, help="seconds of GETs after the flood")
    parser.add_argument(
        "--addresses", type=int, default=40, help="loopback addresses of the second flood (at most 250)"
    )
    parser.add_argument("--database-url", default=DEFAULT_DATABASE_URL)
    parser.add_argument(
        "--legacy-hashes",
        action="store_true",
        help="start with the demo clients stored as argon2 hashes (a var directory from before HMAC), "
        f"the plaintext of {BROKER}'s only at hand",
    )
    return parser.parse_args()


# --- in process: the CPU of one check -------------------------------------------------------------------


def cpu_ms_per_check(hash_of: str, hasher: SecretHasher, checks: int) -> float:
    begun = time.process_time()
    for _ in range(checks):
        hasher.verify(hash_of, "not-the-secret")
    return (time.process_time() - begun) / checks * 1000


def check_costs() -> dict[str, float]:
    """CPU ms of one check of a wrong secret, against an HMAC record and an argon2 (library defaults) one."""
    argon2 = PasswordHasher()
    hasher = SecretHasher(secrets.token_bytes(32), argon2)
    return {
        "HMAC-SHA-256": cpu_ms_per_check(hasher.hash(secrets.token_urlsafe(32)), hasher, 20_000),
        "argon2 (library defaults)": cpu_ms_per_check(argon2.hash(secrets.token_urlsafe(32)), hasher, 5),
    }


# --- the server's var directory -------------------------------------------------------------------------


def prepare_legacy_var(var: Path) -> None:
    """Generates the demo credentials into `var`, stores each client's secret as an argon2 hash, and keeps
    only the broker's plaintext in client-secrets.txt."""
    load_or_create_credentials(load_service_settings(DEFAULT_SETTINGS), var)
    generated = dict(line.split("=", 1) for line in (var / SECRETS_FILE).read_text().splitlines())
    stored = json.loads((var / CREDENTIALS_FILE).read_text())
    argon2 = PasswordHasher()
    for client_id, secret in generated.items():
        stored["clients"][client_id]["secret_hash"] = argon2.hash(secret)
    (var / CREDENTIALS_FILE).write_text(json.dumps(stored))
    (var / SECRETS_FILE).write_text(f"{BROKER}={generated[BROKER]}\n")


# --- measuring while the flood runs ---------------------------------------------------------------------


class Sampler(threading.Thread):
    """Calls `sample()`, then waits `interval` seconds, until stopped."""

    def __init__(self, sample: Callable[[], None], interval: float) -> None:
        super().__init__(daemon=True)
        self._sample = sample
        self._interval = interval
        self._stopping = threading.Event()

    def run(self) -> None:
        while not self._stopping.is_set():
            self._sample()
            self._stopping.wait(self._interval)

    def stop(self) -> None:
        self._stopping.set()
        self.join(timeout=30)


@dataclass
class Latencies:
    """Authenticated GET /prices/EUR: milliseconds per answer, and the answers by status."""

    client: httpx.Client
    ms: list[float] = field(default_factory=list)
    statuses: Counter[int] = field(default_factory=Counter)

    def sample(self) -> None:
        begun = time.perf_counter()
        try:
            status = self.client.get("/prices/EUR").status_code
        except httpx.TransportError:
            status = 0
        self.ms.append((time.perf_counter() - begun) * 1000)
        self.statuses[status] += 1

    def summary(self) -> str:
        figures = f"p50 {percentile(self.ms, 50):6.1f} ms  p99 {percentile(self.ms, 99):6.1f} ms"
        return f"{figures}  max {max(self.ms, default=0):6.1f} ms  ({len(self.ms)} requests, {self._codes()})"

    def _codes(self) -> str:
        return ", ".join(f"{status or 'transport error'}: {n}" for status, n in sorted(self.statuses.items()))


@dataclass
class PeakRss:
    pids: list[int]
    before: dict[int, float] = field(default_factory=dict)
    peak: dict[int, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.before = {pid: rss_mb(pid) for pid in self.pids}
        self.peak = dict(self.before)

    def sample(self) -> None:
        for pid in self.pids:
            with contextlib.suppress(OSError, RuntimeError):  # a worker gone (restarted) is not sampled
                self.peak[pid] = max(self.peak[pid], rss_mb(pid))


def bad_token_request(base_url: str, index: int, address: str) -> int:
    """A bad token request from `address` on a new connection: its status (0 for a transport error)."""
    client_id, secret = f"flood-{secrets.token_hex(8)}", secrets.token_urlsafe(32)
    if index % 3 == 2:
        client_id = KNOWN_CLIENT
    form = {"grant_type": "client_credentials", "client_id": client_id, "client_secret": secret}
    return on_new_connection(address, lambda client: client.post(f"{base_url}/connect/token", data=form))


def control_request(base_url: str, index: int, address: str) -> int:
    """The control flood's request: the trivial GET /health/live from `address` on a new connection."""
    return on_new_connection(address, lambda client: client.get(f"{base_url}/health/live"))


def on_new_connection(address: str, call: Callable[[httpx.Client], httpx.Response]) -> int:
    transport = httpx.HTTPTransport(local_address=address, verify=False)  # plain HTTP: no CA bundle to load
    try:
        with httpx.Client(transport=transport, timeout=30) as client:
            return call(client).status_code
    except httpx.TransportError:
        return 0


def flood_addresses(count: int) -> list[str]:
    """`count` loopback addresses from 127.0.0.2 up (all of 127.0.0.0/8 is this machine's)."""
    return [f"127.0.0.{2 + index}" for index in range(max(1, min(count, 250)))]


@dataclass
class Flood:
    label: str
    seconds: float
    statuses: Counter[int]
    during: Latencies
    rss: PeakRss
    rss_after: dict[int, float]
    cpu_seconds: float


def quiet_latencies(base_url: str, token: str, seconds: float) -> Latencies:
    with httpx.Client(base_url=base_url, headers=api_headers(token), timeout=30) as client:
        quiet = Latencies(client)
        sampler = Sampler(quiet.sample, GET_INTERVAL_SECONDS)
        sampler.start()
        time.sleep(seconds)
        sampler.stop()
    return quiet


def api_headers(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}", "api_version": "1.2"}


def flood(
    server: Process,
    token: str,
    args: argparse.Namespace,
    label: str,
    addresses: list[str],
    request: Callable[[str, int, str], int] = bad_token_request,
) -> Flood:
    """`args.requests` requests (bad token requests unless told) from `args.threads` threads, the i-th from
    `addresses[i % n]`, while GETs and the workers' RSS are sampled."""
    note(f"flood {label}: {args.requests} requests from {args.threads} threads")
    workers = server.worker_pids()

    def send(index: int) -> int:
        return request(server.base_url, index, addresses[index % len(addresses)])

    with httpx.Client(base_url=server.base_url, headers=api_headers(token), timeout=30) as client:
        during, rss = Latencies(client), PeakRss(workers)
        samplers = [Sampler(during.sample, GET_INTERVAL_SECONDS), Sampler(rss.sample, RSS_SAMPLE_SECONDS)]
        cpu = CpuMeter({"API workers": lambda: workers}).start()
        for sampler in samplers:
            sampler.start()
        begun = time.monotonic()
        with ThreadPoolExecutor(args.threads) as pool:
            statuses = Counter(pool.map(send, range(args.requests)))
        seconds = time.monotonic() - begun
        cpu_seconds = cpu.stop()["API workers"]
        time.sleep(args.after)
        for sampler in samplers:
            sampler.stop()
    rss_after = {pid: rss_mb(pid) for pid in workers}
    return Flood(label, seconds, statuses, during, rss, rss_after, cpu_seconds)


# --- the run --------------------------------------------------------------------------------------------


def measure(args: argparse.Namespace, directory: Path, url: str) -> tuple[Latencies, list[Flood]]:
    var = directory / "var"
    if args.legacy_hashes:
        note("preparing a var directory with argon2 hashes")
        prepare_legacy_var(var)
    command = [str(VENV_BIN / "broker-ledger"), "serve", "--workers", str(args.workers), "--no-projections"]
    command += ["--port", str(free_port())]  # on 127.0.0.1, serve's default
    env = server_env(url, var)
    note(f"starting broker-ledger serve with {args.workers} workers")
    with running(command, env, directory / "server.log", "/health") as server:
        wait_for_workers(server, args.workers)
        token = broker_token(server.base_url, var)
        note(f"quiet GET /prices/EUR for {args.baseline:.0f} s")
        quiet = quiet_latencies(server.base_url, token, args.baseline)
        floods = [
            flood(server, token, args, CONTROL, ["127.0.0.1"], control_request),
            flood(server, token, args, "from one address", ["127.0.0.1"]),
            flood(server, token, args, f"from {args.addresses} addresses", flood_addresses(args.addresses)),
        ]
        if incidents := server.incidents():
            note("the server's log tells of trouble:\n" + "\n".join(incidents[:10]))
        note("stopping the server")
    return quiet, floods


def wait_for_workers(server: Process, count: int) -> None:
    """Waits until `count` workers are up and /health has answered on 10 new connections in a row, so that
    a worker uvicorn restarts while starting is not missed by the RSS and CPU figures."""
    deadline = time.monotonic() + WORKERS_TIMEOUT_SECONDS
    while time.monotonic() < deadline:
        if len(server.worker_pids()) == count and all(healthy(server.base_url) for _ in range(10)):
            return
        time.sleep(0.5)
    raise RuntimeError(f"{count} workers did not all come up within {WORKERS_TIMEOUT_SECONDS} s")


def healthy(base_url: str) -> bool:
    try:
        return httpx.get(f"{base_url}/health", timeout=5).status_code == 200
    except httpx.TransportError:
        return False


def print_figures(
    args: argparse.Namespace, costs: dict[str, float], quiet: Latencies, floods: list[Flood]
) -> None:
    print("CPU of one check of a wrong secret, in process (time.process_time):")
    for name, ms in costs.items():
        print(f"  {name:<27} {ms:10.4f} ms")
    records = "HMAC, generated on first start"
    if args.legacy_hashes:
        records = f"argon2 from before HMAC; {BROKER}'s rewritten as HMAC on start, {KNOWN_CLIENT}'s not"
    print(f"\nServer: {args.workers} workers; the demo clients' records: {records}")
    print(f"Authenticated GET /prices/EUR, quiet: {quiet.summary()}")
    control = percentile(floods[0].during.ms, 99)
    for result in floods:
        print_flood(args, result, control)


def print_flood(args: argparse.Namespace, result: Flood, control_p99: float) -> None:
    what = "requests" if result.label == CONTROL else "bad token requests"
    print(f"\nFlood {result.label}: {args.requests} {what}, {args.threads} threads")
    answers = ", ".join(
        f"{status or 'transport error'}: {n}" for status, n in sorted(result.statuses.items())
    )
    print(f"  took {result.seconds:.2f} s; answers {answers}")
    print(f"  CPU of the API workers during the flood: {result.cpu_seconds:.2f} s")
    print(f"  GET /prices/EUR meanwhile: {result.during.summary()}")
    if result.label != CONTROL:
        ratio = percentile(result.during.ms, 99) / control_p99 if control_p99 else float("nan")
        print(f"  its p99 is {ratio:.2f} x the control flood's ({control_p99:.1f} ms)")
    print("  worker RSS (MB), before / peak / after:")
    for pid in result.rss.pids:
        before, peak, after = result.rss.before[pid], result.rss.peak[pid], result.rss_after.get(pid, 0)
        print(f"    worker {pid}: {before:6.1f} / {peak:6.1f} / {after:6.1f}")
    print_targets(result)


def print_targets(result: Flood) -> None:
    p99 = percentile(result.during.ms, 99)
    peak = max(result.rss.peak.values(), default=0)
    no_5xx = not any(status >= 500 or status == 0 for status in result.statuses)
    print(f"  target GET p99 < {P99_TARGET_MS} ms: {p99:.1f} ms, {verdict(p99 < P99_TARGET_MS)}")
    print(
        f"  target no worker above {RSS_TARGET_MB} MB: peak {peak:.1f} MB, {verdict(peak <= RSS_TARGET_MB)}"
    )
    print(f"  target no 5xx or transport error: {verdict(no_5xx)}")


def verdict(met: bool) -> str:
    return "met" if met else "MISSED"


def main() -> None:
    args = parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # the server is stopped, the database dropped
    note("timing one secret check in process")
    costs = check_costs()
    with tempfile.TemporaryDirectory(prefix="bench-token-flood-") as temporary:
        name, url = fresh_database(args.database_url)
        note(f"database {name}")
        try:
            quiet, floods = measure(args, Path(temporary), url)
        except RuntimeError as error:
            sys.exit(f"benchmark failed: {error}")
        finally:
            drop_database(args.database_url, name)
    print_figures(args, costs, quiet, floods)


if __name__ == "__main__":
    main()
