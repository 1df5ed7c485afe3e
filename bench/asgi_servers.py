"""Measures the broker API under uvicorn and under granian, side by side, with wrk.

Usage: .venv/bin/python bench/asgi_servers.py [--seconds 10] [--connections 64] [--workers 2] [--rounds 1]

granian is not a dependency of the service: install it first (`.venv/bin/pip install granian`).

Each server runs the real application (`interface.app:create_app`) with the same number of workers on a
fresh database of the PostgreSQL at $DATABASE_URL (default: the local server on 127.0.0.1:5432), its
projections in-process. Three workloads: GET /prices/EUR (token, version, routing, encoding: no database),
POST /brokerbuy/simulate (also loads the customer and the account from the event store) and POST /brokerbuy
(a created buy, committed at once, with a new Idempotency-Key each: bench/wrk_buy.lua over 50 customers).
Prints requests/s, latency and the whole machine's CPU per request (/proc/stat: the server, its projections,
PostgreSQL and wrk) per server. With --rounds 2 or more the servers take turns, so that a drift of the shared
machine's speed does not favour the one measured first.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from bench.cpu import machine_seconds
from bench.load_support import bench_settings, create_customers, drop_database, fresh_database, run_wrk

BUY_CUSTOMERS = 50

ROOT = Path(__file__).resolve().parents[1]
VENV_BIN = Path(sys.executable).parent
SERVERS = {
    "uvicorn": lambda port, workers: [
        str(VENV_BIN / "uvicorn"),
        "--factory",
        "interface.app:create_app",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--workers",
        str(workers),
        "--no-access-log",
        "--log-level",
        "warning",
    ],
    "granian": lambda port, workers: [
        str(VENV_BIN / "granian"),
        "--interface",
        "asgi",
        "--factory",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--workers",
        str(workers),
        "--log-level",
        "warning",
        "interface.app:create_app",
    ],
}
CUSTOMER_ADDRESS = "bc1qw508d6qejxtdg4y5r3zarvary0c5xw7kv8f3t4"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start(name: str, port: int, workers: int, env: dict[str, str]) -> subprocess.Popen:
    process = subprocess.Popen(
        SERVERS[name](port, workers),
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,  # its own process group, so that stopping it stops its workers too
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                return process
        except httpx.HTTPError:
            time.sleep(0.3)
    process.kill()
    raise RuntimeError(f"{name} did not start: {process.stderr.read().decode()[-2000:]}")


def stop(process: subprocess.Popen) -> None:
    os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def token(env: dict[str, str]) -> str:
    command = [str(VENV_BIN / "broker-ledger"), "token", "--client", "demo-broker"]
    return subprocess.check_output(command, env=env, cwd=ROOT, text=True).strip()


def prepare_customer(base: str, headers: dict[str, str], code: str) -> None:
    with httpx.Client(base_url=base, headers=headers) as client:
        client.post("/customer", json={"customerCode": code, "trustLevel": "Plus", "status": "ACTIVE"})
        client.post(f"/customer/{code}/accounts", json={"customerCryptoAddress": CUSTOMER_ADDRESS})


def wrk(url: str, headers: dict[str, str], seconds: int, connections: int, body: dict | None) -> dict:
    """One wrk run with a fixed body (or none), and the whole machine's CPU milliseconds per request."""
    command = ["wrk", "-t1", f"-c{connections}", f"-d{seconds}s", "--latency"]
    for name, value in headers.items():
        command += ["-H", f"{name}: {value}"]
    if body is not None:
        script = Path(tempfile.mkdtemp(prefix="bl-wrk-")) / "post.lua"
        script.write_text(f'wrk.method = "POST"\nwrk.body = {json.dumps(json.dumps(body))}\n')
        command += ["-s", str(script)]
    before = machine_seconds()
    output = subprocess.check_output([*command, url], text=True)
    cpu = machine_seconds() - before
    requests = int(re.search(r"(\d+) requests in", output).group(1))
    return {
        "rps": float(re.search(r"Requests/sec:\s+([\d.]+)", output).group(1)),
        "p50": re.search(r"50(?:\.000)?%\s+(\S+)", output).group(1),
        "p99": re.search(r"99(?:\.000)?%\s+(\S+)", output).group(1),
        "non2xx": int(m.group(1)) if (m := re.search(r"Non-2xx or 3xx responses: (\d+)", output)) else 0,
        "cpu_ms": 1000 * cpu / max(requests, 1),
    }


def created_buys(url: str, token: str, seconds: int, connections: int, key_prefix: str) -> dict:
    """bench/wrk_buy.lua's buys over the `buyers()`, run as bench/load.py runs them (`run_wrk`), and the
    whole machine's CPU milliseconds per request."""
    script_args = ["bench-", str(BUY_CUSTOMERS), key_prefix, "20", CUSTOMER_ADDRESS]
    before = machine_seconds()
    run = run_wrk(url, token, seconds, connections, script_args)
    cpu = machine_seconds() - before
    return {
        "rps": run.requests / run.seconds,
        "p50": f"{run.latency_ms['p50']:.2f}ms",
        "p99": f"{run.latency_ms['p99']:.2f}ms",
        "non2xx": sum(count for status, count in run.statuses.items() if not 200 <= status < 300),
        "cpu_ms": 1000 * cpu / max(run.requests, 1),
    }


def measure(name: str, args: argparse.Namespace, server_url: str) -> dict[str, dict]:
    var = tempfile.mkdtemp(prefix="bl-bench-")
    database, url = fresh_database(server_url)
    settings = Path(var) / "settings.toml"
    bench_settings(settings)  # the demo settings with the per-client rate limits out of the way
    env = dict(os.environ, DATABASE_URL=url, BROKER_LEDGER_VAR=var, BROKER_LEDGER_SETTINGS=str(settings))
    port = free_port()
    process = start(name, port, args.workers, env)
    try:
        base = f"http://127.0.0.1:{port}"
        bearer = token(env)
        headers = {
            "Authorization": f"Bearer {bearer}",
            "api_version": "1.2",
            "Content-Type": "application/json",
        }
        prepare_customer(base, headers, "bench")
        create_customers(base, bearer, buyers())
        simulate = {
            "customerCode": "bench",
            "currencyCode": "EUR",
            "cryptoCode": "BTC",
            "fiatValue": 100,
            "destinationAddress": CUSTOMER_ADDRESS,
            "paymentMethodCode": "BANK_EUR_BUY",
        }
        return {
            "GET /prices/EUR": wrk(f"{base}/prices/EUR", headers, args.seconds, args.connections, None),
            "POST /brokerbuy/simulate": wrk(
                f"{base}/brokerbuy/simulate", headers, args.seconds, args.connections, simulate
            ),
            "POST /brokerbuy (created)": created_buys(
                f"{base}/brokerbuy", bearer, args.seconds, args.connections, f"{name}-{port}"
            ),
        }
    finally:
        stop(process)
        shutil.rmtree(var, ignore_errors=True)
        drop_database(server_url, database)


def buyers() -> list[str]:
    """The customers bench/wrk_buy.lua buys for (`bench-0` ...), with the trust level `Bench`."""
    return [f"bench-{index}" for index in range(BUY_CUSTOMERS)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=int, default=10)
    parser.add_argument("--connections", type=int, default=64)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args()
    if shutil.which("wrk") is None:
        sys.exit("wrk is needed: apt-get install wrk")
    if shutil.which("granian", path=str(VENV_BIN)) is None:
        sys.exit("granian is needed: .venv/bin/pip install granian")
    server_url = os.environ.get("DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
    print(f"{args.workers} workers, {args.connections} connections, {args.seconds} s per run")
    print(
        f"{'server':10} {'workload':28} {'req/s':>9} {'p50':>9} {'p99':>9} {'non-2xx':>8} {'ms CPU/req':>11}"
    )
    for _ in range(args.rounds):
        for name in SERVERS:
            for workload, figures in measure(name, args, server_url).items():
                print(
                    f"{name:10} {workload:28} {figures['rps']:9.0f} {figures['p50']:>9} {figures['p99']:>9} "
                    f"{figures['non2xx']:8d} {figures['cpu_ms']:11.2f}",
                    flush=True,
                )


if __name__ == "__main__":
    main()
