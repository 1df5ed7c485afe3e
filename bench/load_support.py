"""What bench/load.py is built from: a fresh database, the benchmark's settings file, server processes in
their own process groups, tokens, the customers, wrk runs, and the memory of worker processes."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self

import httpx
import msgspec
import psycopg

from application.settings import DEFAULT_SETTINGS, Settings

ROOT = Path(__file__).resolve().parents[1]
VENV_BIN = Path(sys.executable).parent
WRK_SCRIPT = Path(__file__).with_name("wrk_buy.lua")
CUSTOMER_ADDRESS = "bc1qw508d6qejxtdg4y5r3zarvary0c5xw7kv8f3t4"
BENCH_TRUST_LEVEL = "Bench"
UNLIMITED = "1000000000000"
HUGE_RATE = 1_000_000_000
START_TIMEOUT_SECONDS = 90
INCIDENT = re.compile(r"Child process \[\d+\] (died|failed)|\bERROR\b|CRITICAL|Traceback")
INHERITED_NOT = ("BROKER_LEDGER_SETTINGS", "BROKER_LEDGER_TOKEN_KEY", "BROKER_LEDGER_PROJECTIONS")


# --- the database ---------------------------------------------------------------------------------------


def fresh_database(server_url: str) -> tuple[str, str]:
    """Creates `bench_load_<random>` on the server of `server_url`; returns its name and URL (used by both
    benchmarks, each dropping it with `drop_database` at the end)."""
    name = f"bench_load_{secrets.token_hex(4)}"
    with psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return name, re.sub(r"/[^/?]*(\?|$)", f"/{name}\\1", server_url, count=1)


def drop_database(server_url: str, name: str) -> None:
    with psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def checkpoint(url: str) -> None:
    """Writes PostgreSQL's dirty buffers out now, so that a run does not pay for the writes of the phase
    before it (a superuser's right; skipped without it)."""
    with (
        contextlib.suppress(psycopg.errors.InsufficientPrivilege),
        psycopg.connect(url, autocommit=True) as conn,
    ):
        conn.execute("CHECKPOINT")


def as_in_service(url: str) -> None:
    """VACUUM (ANALYZE) and CHECKPOINT: the database's planner statistics as autovacuum keeps them on a
    store in service (this machine's PostgreSQL runs with autovacuum off: without statistics, statements
    by primary key on tables that grew during set-up or an earlier run are planned as sequential scans),
    and no dirty buffers left for the next run to write."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("VACUUM (ANALYZE)")
    checkpoint(url)


def scalar(url: str, query: str) -> Any:
    with psycopg.connect(url, autocommit=True) as conn:
        return conn.execute(query).fetchone()[0]


# --- the settings file ----------------------------------------------------------------------------------


def bench_settings(path: Path) -> list[str]:
    """Writes the demo settings with a trust level without practical limits (`Bench`) and every rate limit
    found (a settings field or key named like `rate_limit...`) raised very high but left enabled, so its
    cost is measured; returns what it changed."""
    data = tomllib.loads(DEFAULT_SETTINGS.read_text())
    data["trust_levels"][BENCH_TRUST_LEVEL] = {
        key: UNLIMITED for key in ("buy_daily", "buy_monthly", "sell_daily", "sell_monthly")
    }
    changes = [f"trust level {BENCH_TRUST_LEVEL}: limits {UNLIMITED} EUR"]
    for name, default in _rate_limit_fields().items():
        data.setdefault(name, default)
    changes += _loosen_rate_limits(data, "")
    path.write_text("\n".join(_toml_table(data, ())) + "\n")
    return changes


def _rate_limit_fields() -> dict[str, Any]:
    """Top-level settings fields about rate limits, with their defaults as plain data."""
    found = {}
    for info in msgspec.structs.fields(Settings):
        if "rate" in info.name and "limit" in info.name:
            default = info.default if info.default is not msgspec.NODEFAULT else None
            if info.default_factory is not msgspec.NODEFAULT:
                default = info.default_factory()
            found[info.name] = msgspec.to_builtins(default) if default is not None else {}
    return found


def _loosen_rate_limits(data: Any, path: str, inside: bool = False) -> list[str]:
    changes = []
    if not isinstance(data, dict):
        return changes
    for key, value in data.items():
        here = f"{path}.{key}" if path else key
        limited = inside or ("rate" in key and "limit" in key)
        if isinstance(value, dict):
            changes += _loosen_rate_limits(value, here, limited)
        elif limited and _is_number(value) and not _is_duration(key):
            data[key] = str(HUGE_RATE) if isinstance(value, str) else HUGE_RATE
            changes.append(f"{here} = {HUGE_RATE}")
    return changes


def _is_number(value: Any) -> bool:
    if isinstance(value, bool):
        return False
    return isinstance(value, int | float) or (isinstance(value, str) and re.fullmatch(r"\d+(\.\d+)?", value))


def _is_duration(key: str) -> bool:
    if "per_" in key:
        return False
    return key.endswith(("seconds", "minutes", "_ms", "window", "period", "interval"))


def _toml_table(table: dict[str, Any], path: tuple[str, ...]) -> list[str]:
    lines = [f"[{'.'.join(_toml_key(part) for part in path)}]"] if path else []
    lines += [f"{_toml_key(k)} = {_toml_value(v)}" for k, v in table.items() if not isinstance(v, dict)]
    for key, value in table.items():
        if isinstance(value, dict):
            lines += ["", *_toml_table(value, (*path, key))]
    return lines


def _toml_key(key: str) -> str:
    return key if re.fullmatch(r"[A-Za-z0-9_-]+", key) else json.dumps(key)


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float | str):
        return json.dumps(value)  # TOML's basic strings, integers and floats read as JSON's
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(item) for item in value) + "]"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{_toml_key(k)} = {_toml_value(v)}" for k, v in value.items()) + " }"
    raise TypeError(f"cannot write {value!r} as TOML")


# --- server processes -----------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def server_env(database_url: str, var: Path) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if key not in INHERITED_NOT}
    env.update(DATABASE_URL=database_url, BROKER_LEDGER_VAR=str(var), PYTHONUNBUFFERED="1")
    return env


@contextlib.contextmanager
def running(command: list[str], env: dict[str, str], log: Path, health_path: str) -> Iterator[Process]:
    """Starts `command` (which must listen on the port in `--port`) in its own process group, yields it
    once `health_path` answers 200, and stops the whole group at the end."""
    port = int(command[command.index("--port") + 1])
    with log.open("wb") as output:
        popen = subprocess.Popen(
            command, cwd=ROOT, env=env, stdout=output, stderr=subprocess.STDOUT, start_new_session=True
        )
    process = Process(popen, f"http://127.0.0.1:{port}", log)
    try:
        process.wait_until_healthy(health_path)
        yield process
    finally:
        process.stop()


@dataclass
class Process:
    popen: subprocess.Popen[bytes]
    base_url: str
    log: Path

    def wait_until_healthy(self, path: str) -> None:
        deadline = time.monotonic() + START_TIMEOUT_SECONDS
        while time.monotonic() < deadline:
            if self.popen.poll() is not None:
                raise RuntimeError(f"exited with {self.popen.returncode} while starting:\n{self.log_tail()}")
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(f"{self.base_url}{path}", timeout=2).status_code < 500:
                    return
            time.sleep(0.3)
        raise RuntimeError(f"{path} did not answer within {START_TIMEOUT_SECONDS} s:\n{self.log_tail()}")

    def stop(self) -> None:
        """SIGTERM to the process group (the server and its workers), SIGKILL if it lingers."""
        if self.popen.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.popen.pid, signal.SIGTERM)
            try:
                self.popen.wait(timeout=20)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.popen.pid, signal.SIGKILL)
                self.popen.wait()

    def log_tail(self, lines: int = 40) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])

    def incidents(self) -> list[str]:
        """What in the log so far tells of trouble: a worker uvicorn restarted (it died, or did not answer
        the supervisor's health check within 5 s), error lines, and each traceback as one multi-line item."""
        lines = self.log.read_text(errors="replace").splitlines()
        found, index = [], 0
        while index < len(lines):
            end = index + 1
            if lines[index].startswith("Traceback"):
                while end < len(lines) and (lines[end][:1] in (" ", "\t") or not lines[end].strip()):
                    end += 1
                end += 1  # the exception line
                found.append("\n".join(lines[index:end]))
            elif INCIDENT.search(lines[index]):
                found.append(lines[index])
            index = end
        return found

    def worker_pids(self) -> list[int]:
        """The uvicorn worker processes: children of the server started by multiprocessing's spawn."""
        return [pid for pid in children(self.popen.pid) if "spawn_main" in _cmdline(pid)]


def children(parent: int) -> list[int]:
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError):
            fields = stat.read_text().rsplit(")", 1)[1].split()
            if int(fields[1]) == parent:
                found.append(int(stat.parent.name))
    return sorted(found)


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def rss_mb(pid: int) -> float:
    """VmRSS of a process in MB (MiB), from /proc/<pid>/status."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for process {pid}")


# --- tokens and customers -------------------------------------------------------------------------------


def broker_token(base_url: str, var: Path, client_id: str = "demo-broker") -> str:
    """A bearer token the OAuth2 way, with the secret the server generated into var/client-secrets.txt."""
    secrets_by_client = {}
    for line in (var / "client-secrets.txt").read_text().splitlines():
        name, separator, secret = line.partition("=")
        if separator:
            secrets_by_client[name.strip()] = secret.strip()
    response = httpx.post(
        f"{base_url}/connect/token",
        data={
            "grant_type": "client_credentials",
            "client_id": client_id,
            "client_secret": secrets_by_client[client_id],
        },
        timeout=30,
    )
    response.raise_for_status()
    return response.json()["access_token"]


def create_customers(base_url: str, token: str, codes: list[str]) -> None:
    """Registers each customer ACTIVE with the Bench trust level, then opens its BTC account, over HTTP.
    Accounts are opened fewer at a time: each one allocates a deposit address from the one address pool
    of its crypto-currency, so concurrent openings conflict and are retried by the service."""
    customer = {"trustLevel": BENCH_TRUST_LEVEL, "status": "ACTIVE"}
    registrations = [("/customer", {**customer, "customerCode": code}) for code in codes]
    account = {"customerCryptoAddress": CUSTOMER_ADDRESS}
    openings = [(f"/customer/{code}/accounts", account) for code in codes]
    asyncio.run(_post_each(base_url, token, registrations, concurrency=16))
    asyncio.run(_post_each(base_url, token, openings, concurrency=4))


async def _post_each(base_url: str, token: str, requests: list[tuple[str, dict]], concurrency: int) -> None:
    """POSTs each (path, body), `concurrency` at a time; every response must be 201."""
    headers = {"Authorization": f"Bearer {token}", "api_version": "1.2"}
    limits = httpx.Limits(max_connections=concurrency)
    gate = asyncio.Semaphore(concurrency)
    async with httpx.AsyncClient(base_url=base_url, headers=headers, limits=limits, timeout=60) as client:

        async def post(path: str, body: dict) -> None:
            async with gate:
                _expect(await client.post(path, json=body), 201)

        await asyncio.gather(*(post(path, body) for path, body in requests))


def _expect(response: httpx.Response, status: int) -> None:
    if response.status_code != status:
        raise RuntimeError(
            f"{response.request.method} {response.request.url.path} -> {response.status_code}: "
            f"{response.text[:500]}"
        )


# --- wrk ------------------------------------------------------------------------------------------------


@dataclass
class WrkResult:
    connections: int
    seconds: float  # wrk's measured duration
    requests: int
    statuses: dict[int, int]
    socket_errors: dict[str, int]
    latency_ms: dict[str, float]  # p50, p90, p99, p99.9, max
    first_refusal: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> int:
        return sum(n for status, n in self.statuses.items() if 200 <= status < 300)

    @property
    def refused(self) -> int:
        return sum(n for status, n in self.statuses.items() if not 200 <= status < 300)

    @property
    def ok_per_second(self) -> float:
        return self.ok / self.seconds if self.seconds else 0.0


def run_wrk(
    url: str,
    token: str,
    seconds: int,
    connections: int,
    script_args: list[str],
    script: Path = WRK_SCRIPT,
) -> WrkResult:
    """One wrk run with bench/wrk_buy.lua (or `script`, which prints the same "BENCH" lines, as
    bench/wrk_get.lua does); its "BENCH" lines are parsed into a WrkResult."""
    command = ["wrk", "-t1", f"-c{connections}", f"-d{seconds}s", "--latency", "--timeout", "10s"]
    command += ["-H", f"Authorization: Bearer {token}", "-s", str(script), url, "--", *script_args]
    finished = subprocess.run(command, capture_output=True, text=True)
    if finished.returncode != 0 or "BENCH requests" not in finished.stdout:
        raise RuntimeError(f"wrk failed ({finished.returncode}): {finished.stderr[-2000:]}{finished.stdout}")
    output = finished.stdout
    values = dict(re.findall(r"^BENCH (\S+) (\d+)$", output, flags=re.MULTILINE))
    refusal = re.search(r"^BENCH_REFUSAL (.*)$", output, flags=re.MULTILINE)
    return WrkResult(
        connections=connections,
        seconds=int(values["duration_us"]) / 1e6,
        requests=int(values["requests"]),
        statuses={int(k[7:]): int(v) for k, v in values.items() if k.startswith("status_")},
        socket_errors={k[7:]: int(v) for k, v in values.items() if k.startswith("socket_")},
        latency_ms={p: int(values[f"{p}_us"]) / 1000 for p in ("p50", "p90", "p99", "p99.9", "max")},
        first_refusal=refusal.group(1) if refusal else "",
    )


class Poller:
    """Calls `sample(connection)` every `interval` seconds (less the sample's own time), on one autocommit
    connection, in a thread of its own, from `start()` to `stop()`: the benchmark's samplers."""

    name = "poller"

    def __init__(self, url: str, interval: float) -> None:
        self.url = url
        self.interval = interval
        self._stop = threading.Event()
        self._connected = threading.Event()
        self.backend_pid: int | None = None  # its connection's server process (`bench.cpu.INSTRUMENTS`)
        self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)

    def start(self) -> Self:
        """Starts sampling, once connected (at most 10 s): its backend is known from the start."""
        self._thread.start()
        self._connected.wait(timeout=10)
        return self

    def backend_pids(self) -> list[int]:
        return [self.backend_pid] if self.backend_pid is not None else []

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def sample(self, conn: psycopg.Connection[Any]) -> None:
        raise NotImplementedError

    def _run(self) -> None:
        with psycopg.connect(self.url, autocommit=True, application_name=f"bench {self.name}") as conn:
            self.backend_pid = conn.info.backend_pid
            self._connected.set()
            while not self._stop.is_set():
                begun = time.monotonic()
                self.sample(conn)
                self._stop.wait(max(self.interval - (time.monotonic() - begun), 0.0))
